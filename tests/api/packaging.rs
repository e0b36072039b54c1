//! The container image builds without a Docker engine to try it: every file the manifest needs is
//! in the build context and copied before the build that needs it.

/// Top-level folders of the targets `Cargo.toml` declares explicitly (`[[bin]] path`, `[[bench]]`
/// names under `benches/`).
fn declared_target_folders(manifest: &str) -> Vec<String> {
    let mut folders = Vec::new();
    let mut section = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
            continue;
        }
        let value = |key: &str| {
            line.strip_prefix(key)
                .and_then(|rest| rest.trim_start().strip_prefix('='))
                .map(|v| v.trim().trim_matches('"').to_owned())
        };
        match section {
            "[[bin]]" | "[[test]]" | "[[example]]" => {
                if let Some(path) = value("path") {
                    folders.push(path.split('/').next().unwrap_or_default().to_owned());
                }
            }
            "[[bench]]" if value("name").is_some() => folders.push("benches".to_owned()),
            _ => {}
        }
    }
    folders.sort();
    folders.dedup();
    folders
}

/// The workspace's members other than the root package (`members = [".", "sdk/rust"]`, on one
/// line or several).
fn workspace_members(manifest: &str) -> Vec<String> {
    let Some(start) = manifest.find("\nmembers") else {
        return Vec::new();
    };
    let list = &manifest[start..];
    let list = &list[list.find('[').map_or(0, |i| i + 1)..list.find(']').unwrap_or(list.len())];
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty() && m != ".")
        .collect()
}

#[test]
fn workspace_members_are_read_from_one_line_or_several() {
    let one = "[workspace]\nmembers = [\".\", \"sdk/rust\"]\n";
    let several = "[workspace]\nmembers = [\n  \".\",\n  \"sdk/rust\",\n  \"integrations/x\",\n]\n";
    assert_eq!(workspace_members(one), ["sdk/rust"]);
    assert_eq!(workspace_members(several), ["sdk/rust", "integrations/x"]);
}

/// What each `COPY` line copies (sources only), in order, up to the first `cargo build`.
fn copied_before_first_build(dockerfile: &str) -> Vec<String> {
    let mut copied = Vec::new();
    for line in dockerfile.lines().map(str::trim) {
        if line.contains("cargo build") {
            break;
        }
        if let Some(rest) = line.strip_prefix("COPY ") {
            let words: Vec<&str> = rest
                .split_whitespace()
                .filter(|w| !w.starts_with("--"))
                .collect();
            if let Some((_, sources)) = words.split_last() {
                copied.extend(sources.iter().map(|s| s.trim_end_matches('/').to_owned()));
            }
        }
    }
    copied
}

#[test]
fn the_image_build_context_has_every_target_the_manifest_declares() {
    let manifest = std::fs::read_to_string("Cargo.toml").unwrap();
    let dockerfile = std::fs::read_to_string("Dockerfile").unwrap();
    let ignored = std::fs::read_to_string(".dockerignore").unwrap_or_default();
    let early = copied_before_first_build(&dockerfile);
    for folder in declared_target_folders(&manifest) {
        assert!(
            !ignored
                .lines()
                .any(|l| l.trim().trim_end_matches('/') == folder),
            ".dockerignore leaves out {folder}/, which Cargo.toml needs"
        );
        // src/ is stubbed for the dependency layer (a dummy main) and copied after it.
        if folder != "src" {
            assert!(
                early.contains(&folder),
                "the Dockerfile's first `cargo build` loads the manifest, which declares targets in \
                 {folder}/: COPY {folder} before it (copied before it: {early:?})"
            );
        }
    }
    for member in workspace_members(&manifest) {
        assert!(
            early.contains(&member),
            "the Dockerfile's first `cargo build` loads every workspace member: COPY {member} \
             before it (copied before it: {early:?})"
        );
    }
    for needed in ["src", "migrations", "openapi"] {
        assert!(
            dockerfile
                .lines()
                .any(|l| l.trim().starts_with(&format!("COPY {needed} "))),
            "the Dockerfile never copies {needed}/"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// deploy/: the admin token arrives from a secret, the DNS port is open wherever the DNS listener
// is on, and kustomize applies every manifest. Read line by line (no YAML parser): the files keep
// to block style, two-space indents, `#` comments on their own or after ` #`.
// ---------------------------------------------------------------------------------------------

use std::collections::HashMap;
use std::path::Path;

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// A line without its comment.
fn uncommented(line: &str) -> &str {
    if line.trim_start().starts_with('#') {
        return "";
    }
    line.find(" #").map_or(line, |at| &line[..at]).trim_end()
}

fn unquote(value: &str) -> &str {
    value.trim().trim_matches(|c| c == '"' || c == '\'')
}

/// The lines after `lines[at]` that are indented more than it (its block), comments dropped.
fn block_under(lines: &[String], at: usize) -> Vec<String> {
    let base = indent(&lines[at]);
    lines[at + 1..]
        .iter()
        .map(|l| uncommented(l))
        .filter(|l| !l.trim().is_empty())
        .take_while(|l| indent(l) > base)
        .map(str::to_owned)
        .collect()
}

fn owned_lines(text: &str) -> Vec<String> {
    text.lines().map(|l| uncommented(l).to_owned()).collect()
}

/// The block under the first line that is exactly `key:` (after indentation).
fn sub_block(lines: &[String], key: &str) -> Vec<String> {
    let line = format!("{key}:");
    lines
        .iter()
        .position(|l| l.trim() == line)
        .map(|at| block_under(lines, at))
        .unwrap_or_default()
}

/// An environment variable's value in `KEY: value` (map) or `- KEY=value` (list) form.
fn env_value(lines: &[String], name: &str) -> Option<String> {
    lines.iter().find_map(|l| {
        let entry = l.trim().trim_start_matches("- ");
        let entry = entry.strip_prefix('"').unwrap_or(entry);
        entry
            .strip_prefix(name)
            .and_then(|rest| rest.trim_start_matches('"').strip_prefix([':', '=']))
            .map(|value| unquote(value).to_owned())
    })
}

/// The port of a `host:port` address (the value of ORACLE_DNS_LISTEN).
fn port_of(address: &str) -> Option<u16> {
    address.rsplit(':').next()?.parse().ok()
}

/// Each `- ` item of a block sequence as `key: value` pairs: its own lines and those nested under
/// it (the first of a key wins).
fn sequence_items(text: &str) -> Vec<Vec<(String, String)>> {
    let lines = owned_lines(text);
    let pair = |line: &str| {
        let line = line.trim().trim_start_matches("- ");
        line.split_once(':')
            .map(|(k, v)| (unquote(k).to_owned(), unquote(v).to_owned()))
    };
    let mut items = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        if !line.trim_start().starts_with("- ") {
            continue;
        }
        let mut pairs: Vec<(String, String)> = pair(line).into_iter().collect();
        pairs.extend(block_under(&lines, at).iter().filter_map(|l| pair(l)));
        items.push(pairs);
    }
    items
}

fn get<'a>(item: &'a [(String, String)], key: &str) -> Option<&'a str> {
    item.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Compose services by name, each with its own lines and those of the anchors it merges in
/// (`<<: *name`).
fn compose_services(compose: &str) -> Vec<(String, Vec<String>)> {
    let lines = owned_lines(compose);
    let mut anchors = HashMap::new();
    for (at, line) in lines.iter().enumerate() {
        if let Some((_, anchor)) = line.split_once(": &") {
            anchors.insert(anchor.trim().to_owned(), block_under(&lines, at));
        }
    }
    let Some(start) = lines.iter().position(|l| l == "services:") else {
        return Vec::new();
    };
    let mut services = Vec::new();
    for (at, line) in lines.iter().enumerate().skip(start + 1) {
        if indent(line) == 0 && !line.trim().is_empty() {
            break;
        }
        if indent(line) == 2 && line.ends_with(':') {
            let mut own = block_under(&lines, at);
            let merged: Vec<String> = own
                .iter()
                .filter_map(|l| l.trim().strip_prefix("<<: *"))
                .flat_map(|anchor| anchors.get(anchor.trim()).cloned().unwrap_or_default())
                .collect();
            own.extend(merged);
            services.push((line.trim().trim_end_matches(':').to_owned(), own));
        }
    }
    services
}

/// What is wrong with the compose file: a service with ORACLE_DNS_LISTEN that does not publish
/// the port as UDP; an oracle service whose admin token is not a mounted secret; a secret file
/// that git does not ignore.
fn compose_problems(compose: &str, gitignore: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let services = compose_services(compose);
    let top = owned_lines(compose);
    let top_secrets = top
        .iter()
        .position(|l| l == "secrets:")
        .map(|at| block_under(&top, at))
        .unwrap_or_default();
    let mut oracles = 0;
    for (name, lines) in &services {
        if let Some(address) = env_value(lines, "ORACLE_DNS_LISTEN") {
            match port_of(&address) {
                None => problems.push(format!("{name}: ORACLE_DNS_LISTEN {address} has no port")),
                Some(port) => {
                    let published = sub_block(lines, "ports").iter().any(|l| {
                        let entry = unquote(l.trim().trim_start_matches("- "));
                        entry == format!("{port}/udp") || entry.ends_with(&format!(":{port}/udp"))
                    });
                    if !published {
                        problems.push(format!(
                            "{name}: ORACLE_DNS_LISTEN is {address} but ports: does not publish \
                             {port}/udp (short syntax, e.g. \"5381:{port}/udp\")"
                        ));
                    }
                }
            }
        }
        if !lines
            .iter()
            .any(|l| l.trim().starts_with("image: placement-oracle"))
        {
            continue;
        }
        oracles += 1;
        let Some(file) = env_value(lines, "ORACLE_ADMIN_TOKEN_FILE") else {
            problems.push(format!(
                "{name}: no ORACLE_ADMIN_TOKEN_FILE: the admin token must come from a compose \
                 secret (/run/secrets/NAME)"
            ));
            continue;
        };
        let Some(secret) = file.strip_prefix("/run/secrets/") else {
            problems.push(format!(
                "{name}: ORACLE_ADMIN_TOKEN_FILE {file} is not a compose secret (/run/secrets/NAME)"
            ));
            continue;
        };
        let mounted = sub_block(lines, "secrets")
            .iter()
            .any(|l| unquote(l.trim().trim_start_matches("- ")) == secret);
        if !mounted {
            problems.push(format!("{name}: secrets: does not list {secret}"));
        }
        let defined = top_secrets
            .iter()
            .position(|l| l.trim() == format!("{secret}:"))
            .map(|at| {
                let under = block_under(&top_secrets, at);
                env_value(&under, "file")
            });
        match defined {
            None => problems.push(format!("the top-level secrets: does not define {secret}")),
            Some(None) => problems.push(format!("secret {secret} is not `file:` (a local file)")),
            Some(Some(path)) => {
                // Relative to deploy/, where the compose file is.
                let path = format!("deploy/{}", path.trim_start_matches("./"));
                let ignored = gitignore.lines().map(str::trim).any(|pattern| {
                    let pattern = pattern.trim_start_matches('/').trim_end_matches('/');
                    !pattern.is_empty()
                        && !pattern.starts_with('#')
                        && (path == pattern || path.starts_with(&format!("{pattern}/")))
                });
                if !ignored {
                    problems.push(format!(
                        "secret {secret} is read from {path}, which .gitignore does not cover: a \
                         real token could be committed"
                    ));
                }
            }
        }
    }
    if oracles == 0 {
        problems.push("no compose service runs image placement-oracle".to_owned());
    }
    problems
}

/// Where ORACLE_DNS_LISTEN is set (the ConfigMap or the Deployment's env), the Deployment declares
/// its port as a UDP containerPort and the Service forwards a UDP port to it.
fn k8s_dns_problems(configmap: &str, deployment: &str, service: &str) -> Vec<String> {
    let from_env = sequence_items(deployment)
        .into_iter()
        .find(|item| get(item, "name") == Some("ORACLE_DNS_LISTEN"))
        .and_then(|item| get(&item, "value").map(str::to_owned));
    let Some(address) = env_value(&owned_lines(configmap), "ORACLE_DNS_LISTEN").or(from_env) else {
        return Vec::new();
    };
    let Some(port) = port_of(&address) else {
        return vec![format!("ORACLE_DNS_LISTEN {address} has no port")];
    };
    let declared = sequence_items(deployment).into_iter().find(|item| {
        get(item, "containerPort") == Some(&port.to_string())
            && get(item, "protocol") == Some("UDP")
    });
    let Some(declared) = declared else {
        return vec![format!(
            "ORACLE_DNS_LISTEN is {address} but the Deployment declares no containerPort {port} \
             with protocol: UDP"
        )];
    };
    let port_name = get(&declared, "name").unwrap_or_default().to_owned();
    let forwarded = sequence_items(service).iter().any(|item| {
        let target = get(item, "targetPort");
        get(item, "protocol") == Some("UDP")
            && (target == Some(&port.to_string())
                || (!port_name.is_empty() && target == Some(&port_name)))
    });
    if forwarded {
        Vec::new()
    } else {
        vec![format!(
            "ORACLE_DNS_LISTEN is {address} but the Service has no UDP port with targetPort \
             {port_name} (or {port})"
        )]
    }
}

/// The Deployment takes the admin token from a Secret: ORACLE_ADMIN_TOKEN_FILE in a mounted
/// secret volume, or ORACLE_ADMIN_TOKEN from a secretKeyRef. The Secret and key it names are the
/// ones secret.example.yaml shows.
fn k8s_token_problems(deployment: &str, secret_example: &str) -> Vec<String> {
    let items = sequence_items(deployment);
    let env = |name: &str| {
        items
            .iter()
            .find(|item| get(item, "name") == Some(name) && item.len() > 1)
    };
    let (secret, key) = if let Some(item) = env("ORACLE_ADMIN_TOKEN_FILE") {
        let Some(file) = get(item, "value") else {
            return vec!["ORACLE_ADMIN_TOKEN_FILE has no value".to_owned()];
        };
        let mount = items.iter().find(|m| {
            get(m, "mountPath").is_some_and(|dir| {
                Path::new(file).parent() == Some(Path::new(dir.trim_end_matches('/')))
            })
        });
        let Some(mount) = mount else {
            return vec![format!(
                "no volumeMount holds ORACLE_ADMIN_TOKEN_FILE {file}"
            )];
        };
        let volume_name = get(mount, "name").unwrap_or_default();
        let volume = items
            .iter()
            .find(|v| get(v, "name") == Some(volume_name) && get(v, "secretName").is_some());
        let Some(volume) = volume else {
            return vec![format!(
                "the volume {volume_name} mounted for ORACLE_ADMIN_TOKEN_FILE is not a secret volume"
            )];
        };
        let file_name = Path::new(file).file_name().and_then(|n| n.to_str());
        // With `items:`, the key mapped to the file's name; without, the file's name is the key.
        let key = items
            .iter()
            .find(|i| get(i, "path") == file_name && get(i, "key").is_some())
            .and_then(|i| get(i, "key"))
            .or(file_name)
            .unwrap_or_default();
        (
            get(volume, "secretName").unwrap_or_default().to_owned(),
            key.to_owned(),
        )
    } else if let Some(item) = env("ORACLE_ADMIN_TOKEN") {
        match (
            get(item, "secretKeyRef"),
            get(item, "name"),
            get(item, "key"),
        ) {
            (Some(_), _, Some(key)) => {
                // The item's `name` is the variable; the secretKeyRef's name follows it.
                let name = item
                    .iter()
                    .filter(|(k, _)| k == "name")
                    .nth(1)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                (name, key.to_owned())
            }
            _ => return vec!["ORACLE_ADMIN_TOKEN is set without a secretKeyRef".to_owned()],
        }
    } else {
        return vec![
            "the Deployment sets neither ORACLE_ADMIN_TOKEN_FILE (a mounted Secret) nor \
             ORACLE_ADMIN_TOKEN (a secretKeyRef): it would refuse to listen on 0.0.0.0"
                .to_owned(),
        ];
    };
    let documented = secret_example.split("\n---").any(|doc| {
        let lines = owned_lines(doc);
        doc.contains("kind: Secret")
            && lines.iter().any(|l| l.trim() == format!("name: {secret}"))
            && lines
                .iter()
                .any(|l| l.trim().starts_with(&format!("{key}:")))
    });
    if documented {
        Vec::new()
    } else {
        vec![format!(
            "the admin token comes from Secret {secret}, key {key}, which secret.example.yaml does \
             not show"
        )]
    }
}

/// Lines that give ORACLE_ADMIN_TOKEN a value (`ORACLE_ADMIN_TOKEN: x`, `ORACLE_ADMIN_TOKEN=x`),
/// commented out or not.
fn literal_admin_tokens(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| {
            line.match_indices("ORACLE_ADMIN_TOKEN").any(|(at, name)| {
                let rest = line[at + name.len()..].trim_start_matches(['"', '\'']);
                rest.strip_prefix([':', '=']).is_some_and(|value| {
                    !unquote(value.split(" #").next().unwrap_or("")).is_empty()
                })
            })
        })
        .map(str::to_owned)
        .collect()
}

/// Every manifest in a folder with a kustomization.yaml is among its `resources:` (examples,
/// `*.example.yaml`, excepted), every resource exists, and no other folder holds manifests.
fn kustomize_problems(dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut manifests = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            problems.extend(kustomize_problems(&path));
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if (name.ends_with(".yaml") || name.ends_with(".yml"))
            && name != "kustomization.yaml"
            && !name.contains(".example.")
        {
            manifests.push(name);
        }
    }
    let Ok(kustomization) = std::fs::read_to_string(dir.join("kustomization.yaml")) else {
        if !manifests.is_empty() {
            problems.push(format!(
                "{}: {manifests:?} are in no kustomization (add a kustomization.yaml)",
                dir.display()
            ));
        }
        return problems;
    };
    problems.extend(unlisted_resources(&kustomization, &manifests, |r| {
        dir.join(r).exists()
    }));
    problems
}

fn unlisted_resources(
    kustomization: &str,
    manifests: &[String],
    exists: impl Fn(&str) -> bool,
) -> Vec<String> {
    let resources: Vec<String> = sub_block(&owned_lines(kustomization), "resources")
        .iter()
        .filter_map(|l| l.trim().strip_prefix("- ").map(|r| unquote(r).to_owned()))
        .collect();
    let mut problems: Vec<String> = manifests
        .iter()
        .filter(|m| !resources.contains(m))
        .map(|m| format!("{m} is not listed in kustomization.yaml's resources"))
        .collect();
    problems.extend(
        resources
            .iter()
            .filter(|r| !exists(r))
            .map(|r| format!("kustomization.yaml lists {r}, which does not exist")),
    );
    problems
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A change to a real file, for the tests that show a check can fail; the file must still hold
/// `from`, or the mutation (and with it the test) would prove nothing.
fn mutated(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "the file no longer holds {from:?}: update this test's mutation"
    );
    text.replacen(from, to, 1)
}

#[test]
fn compose_publishes_the_dns_port_and_mounts_the_admin_token_as_a_secret() {
    let compose = read("deploy/docker-compose.yml");
    let gitignore = read(".gitignore");
    assert_eq!(compose_problems(&compose, &gitignore), Vec::<String>::new());
    assert!(
        compose_services(&compose)
            .iter()
            .any(|(_, lines)| env_value(lines, "ORACLE_DNS_LISTEN").is_some()),
        "no compose service sets ORACLE_DNS_LISTEN (then the port check proves nothing)"
    );

    // The checks can fail.
    let unpublished = mutated(&compose, "\"5382:5353/udp\"", "\"5382:5353\"");
    assert!(compose_problems(&unpublished, &gitignore)[0].starts_with("oracle-2:"));
    let literal = mutated(
        &compose,
        "ORACLE_ADMIN_TOKEN_FILE: /run/secrets/oracle_admin_token",
        "ORACLE_ADMIN_TOKEN: 0123456789abcdef0123456789abcdef",
    );
    assert_eq!(compose_problems(&literal, &gitignore).len(), 2);
    assert_eq!(literal_admin_tokens(&literal).len(), 1);
    let unmounted = mutated(&compose, "  secrets:\n    - oracle_admin_token\n", "");
    assert_eq!(compose_problems(&unmounted, &gitignore).len(), 2);
    let tracked = gitignore.replace("/deploy/secrets/", "/deploy/other/");
    assert_eq!(compose_problems(&compose, &tracked).len(), 2);
}

#[test]
fn k8s_declares_the_dns_port_on_the_pod_and_the_service() {
    let configmap = read("deploy/k8s/configmap.yaml");
    let deployment = read("deploy/k8s/deployment.yaml");
    let service = read("deploy/k8s/service.yaml");
    assert!(
        env_value(&owned_lines(&configmap), "ORACLE_DNS_LISTEN").is_some(),
        "the ConfigMap no longer sets ORACLE_DNS_LISTEN (then the port check proves nothing)"
    );
    assert_eq!(
        k8s_dns_problems(&configmap, &deployment, &service),
        Vec::<String>::new()
    );

    // The checks can fail.
    let moved = mutated(&configmap, "\"0.0.0.0:5353\"", "\"0.0.0.0:5354\"");
    assert_eq!(k8s_dns_problems(&moved, &deployment, &service).len(), 1);
    let tcp = mutated(
        &deployment,
        "containerPort: 5353\n              protocol: UDP",
        "containerPort: 5353\n              protocol: TCP",
    );
    assert_eq!(k8s_dns_problems(&configmap, &tcp, &service).len(), 1);
    let unforwarded = mutated(&service, "targetPort: dns", "targetPort: http");
    assert_eq!(
        k8s_dns_problems(&configmap, &deployment, &unforwarded).len(),
        1
    );
}

#[test]
fn k8s_takes_the_admin_token_from_a_secret() {
    let deployment = read("deploy/k8s/deployment.yaml");
    let example = read("deploy/k8s/secret.example.yaml");
    assert_eq!(
        k8s_token_problems(&deployment, &example),
        Vec::<String>::new()
    );

    // The checks can fail; a secretKeyRef passes too.
    let unmounted = mutated(
        &deployment,
        "mountPath: /run/secrets/placement-oracle",
        "mountPath: /run/elsewhere",
    );
    assert_eq!(k8s_token_problems(&unmounted, &example).len(), 1);
    let plain = mutated(
        &deployment,
        "secretName: placement-oracle-admin",
        "emptyDirName: x",
    );
    assert_eq!(k8s_token_problems(&plain, &example).len(), 1);
    let undocumented = mutated(
        &example,
        "admin-token: \"CHANGE_ME\"",
        "token: \"CHANGE_ME\"",
    );
    assert_eq!(k8s_token_problems(&deployment, &undocumented).len(), 1);
    let by_ref = mutated(
        &deployment,
        "            - name: ORACLE_ADMIN_TOKEN_FILE\n              value: /run/secrets/placement-oracle/admin-token\n",
        "            - name: ORACLE_ADMIN_TOKEN\n              valueFrom:\n                secretKeyRef:\n                  name: placement-oracle-admin\n                  key: admin-token\n",
    );
    assert_eq!(k8s_token_problems(&by_ref, &example), Vec::<String>::new());
    let wrong_ref = by_ref.replace("key: admin-token", "key: token");
    assert_eq!(k8s_token_problems(&wrong_ref, &example).len(), 1);
}

#[test]
fn no_deployment_file_holds_an_admin_token() {
    fn visit(dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.to_string_lossy().into_owned();
            if path.is_dir() {
                visit(&path, found);
            } else if name.ends_with(".yaml") || name.ends_with(".yml") {
                let text = std::fs::read_to_string(&path).unwrap();
                found.extend(
                    literal_admin_tokens(&text)
                        .into_iter()
                        .map(|l| format!("{name}: {l}")),
                );
            }
        }
    }
    let mut found = literal_admin_tokens(&read("Dockerfile"));
    visit(Path::new("deploy"), &mut found);
    assert_eq!(
        found,
        Vec::<String>::new(),
        "pass the admin token in a secret"
    );

    // The check can fail, and passes a reference to a secret.
    assert_eq!(
        literal_admin_tokens("    ORACLE_ADMIN_TOKEN: \"x\"").len(),
        1
    );
    assert_eq!(
        literal_admin_tokens("# - ORACLE_ADMIN_TOKEN=change-me").len(),
        1
    );
    assert!(literal_admin_tokens("ORACLE_ADMIN_TOKEN_FILE: /run/secrets/t").is_empty());
    assert!(literal_admin_tokens("  - name: ORACLE_ADMIN_TOKEN\n").is_empty());
}

#[test]
fn kustomize_applies_every_k8s_manifest_but_the_examples() {
    assert_eq!(
        kustomize_problems(Path::new("deploy/k8s")),
        Vec::<String>::new()
    );

    // The check can fail.
    let kustomization = read("deploy/k8s/kustomization.yaml");
    let dropped = mutated(
        &kustomization,
        "  - networkpolicy.yaml",
        "  # - networkpolicy.yaml",
    );
    let manifests = ["networkpolicy.yaml".to_owned()];
    assert_eq!(
        unlisted_resources(&dropped, &manifests, |_| true),
        ["networkpolicy.yaml is not listed in kustomization.yaml's resources"]
    );
    assert_eq!(
        unlisted_resources(&kustomization, &manifests, |_| false).len(),
        5
    );
}
