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
    for needed in ["src", "migrations", "openapi"] {
        assert!(
            dockerfile
                .lines()
                .any(|l| l.trim().starts_with(&format!("COPY {needed} "))),
            "the Dockerfile never copies {needed}/"
        );
    }
}
