//! The Grafana dashboard shipped in deploy/grafana and the alert rules in deploy/prometheus: they
//! query only metrics the oracle exports (as their kind is exported), the dashboard through the
//! datasource compose provisions, and compose loads both.

use placement_oracle::telemetry::metric;
use serde_json::Value;

const DASHBOARD: &str = "deploy/grafana/dashboards/placement-oracle.json";

/// The metric names an expression reads: identifiers with the oracle's prefix.
fn metrics_in(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|word| word.starts_with("oracle_"))
        .map(str::to_owned)
        .collect()
}

/// Whether the oracle exports a series of that name: a counter or gauge by its name, a histogram
/// only by its parts (Prometheus has no series under a histogram's bare name).
fn exported(series: &str) -> bool {
    metric::ALL.iter().any(|(name, histogram)| {
        if *histogram {
            ["_bucket", "_sum", "_count"]
                .iter()
                .any(|part| series.strip_suffix(part) == Some(name))
        } else {
            series == *name
        }
    })
}

/// What is wrong with a dashboard, each a sentence naming the panel.
fn dashboard_problems(dashboard: &Value, datasource_uid: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let panels = dashboard["panels"].as_array().cloned().unwrap_or_default();
    if panels.is_empty() {
        problems.push("the dashboard has no panels".to_owned());
    }
    let mut ids = std::collections::BTreeSet::new();
    for panel in &panels {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        if !ids.insert(panel["id"].as_i64()) {
            problems.push(format!("{title}: its id is not unique"));
        }
        if panel["type"] == "row" {
            continue;
        }
        if panel["datasource"]["uid"] != datasource_uid {
            problems.push(format!("{title}: not on the provisioned datasource"));
        }
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("{title}: no query"));
        }
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_default();
            let names = metrics_in(expr);
            if names.is_empty() {
                problems.push(format!("{title}: `{expr}` reads no metric of the oracle's"));
            }
            for name in names.iter().filter(|name| !exported(name)) {
                problems.push(format!(
                    "{title}: `{name}` is not a metric the oracle exports"
                ));
            }
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let query = variable["definition"].as_str().unwrap_or_default();
        for name in metrics_in(query).iter().filter(|name| !exported(name)) {
            problems.push(format!(
                "variable {}: `{name}` is not exported",
                variable["name"]
            ));
        }
    }
    problems
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The uid of the datasource compose's Grafana is provisioned with.
fn provisioned_uid() -> String {
    let provisioning = read("deploy/grafana/provisioning/datasources/prometheus.yml");
    provisioning
        .lines()
        .find_map(|line| line.trim().strip_prefix("uid:"))
        .map(|uid| uid.trim().to_owned())
        .expect("the datasource has a uid")
}

#[test]
fn the_dashboard_reads_only_what_the_oracle_exports_from_the_provisioned_datasource() {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let uid = provisioned_uid();
    assert_eq!(dashboard_problems(&dashboard, &uid), Vec::<String>::new());
    assert_eq!(dashboard["uid"], "placement-oracle");

    // The checks can fail.
    let text = read(DASHBOARD);
    let misspelt: Value = serde_json::from_str(&text.replacen(
        "oracle_placements_total",
        "oracle_placement_total",
        1,
    ))
    .unwrap();
    assert_eq!(dashboard_problems(&misspelt, &uid).len(), 1);
    let counter_as_histogram: Value = serde_json::from_str(&text.replacen(
        "oracle_placement_decision_duration_seconds_bucket",
        "oracle_placements_total_bucket",
        1,
    ))
    .unwrap();
    assert_eq!(dashboard_problems(&counter_as_histogram, &uid).len(), 1);
    let bare_histogram: Value = serde_json::from_str(&text.replacen(
        "oracle_placement_decision_duration_seconds_bucket",
        "oracle_placement_decision_duration_seconds",
        1,
    ))
    .unwrap();
    assert_eq!(dashboard_problems(&bare_histogram, &uid).len(), 1);
    assert!(!dashboard_problems(&dashboard, "another").is_empty());
}

#[test]
fn compose_runs_grafana_with_the_dashboard_and_its_datasource() {
    let compose = read("deploy/docker-compose.yml");
    for mount in [
        "./grafana/provisioning:/etc/grafana/provisioning:ro",
        "./grafana/dashboards:/var/lib/grafana/dashboards:ro",
    ] {
        assert!(compose.contains(mount), "compose does not mount {mount}");
    }
    let provider = read("deploy/grafana/provisioning/dashboards/placement-oracle.yml");
    assert!(provider.contains("path: /var/lib/grafana/dashboards"));
    let datasource = read("deploy/grafana/provisioning/datasources/prometheus.yml");
    assert!(
        datasource.contains("url: http://prometheus:9090") && compose.contains("  prometheus:"),
        "the datasource is compose's Prometheus"
    );
}

const ALERTS: &str = "deploy/prometheus/alerts.yml";

/// Each rule of an alert-rules file, as `(alert, expression)`: the expression after `expr:`, on
/// its line or in the indented block below it.
fn alert_rules(text: &str) -> Vec<(String, String)> {
    let mut rules: Vec<(String, String)> = Vec::new();
    let mut in_expr = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            rules.push((name.trim().to_owned(), String::new()));
            in_expr = false;
        } else if let Some(expr) = trimmed.strip_prefix("expr:") {
            if let Some((_, e)) = rules.last_mut() {
                e.push_str(expr.trim().trim_start_matches('|'));
            }
            in_expr = true;
        } else if in_expr
            && !trimmed.is_empty()
            && !trimmed.contains(": ")
            && !trimmed.ends_with(':')
        {
            if let Some((_, e)) = rules.last_mut() {
                e.push(' ');
                e.push_str(trimmed);
            }
        } else {
            in_expr = false;
        }
    }
    rules
}

/// What is wrong with alert rules: an expression that reads no metric of the oracle's (but for
/// the scrape's own `up`, or its absence), or one the oracle does not export.
fn alert_problems(text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (alert, expr) in alert_rules(text) {
        let names = metrics_in(&expr);
        let scrape_only = expr.starts_with("up{") || expr.starts_with("absent(up{");
        if names.is_empty() && !scrape_only {
            problems.push(format!("{alert}: `{expr}` reads no metric of the oracle's"));
        }
        for name in names.iter().filter(|name| !exported(name)) {
            problems.push(format!(
                "{alert}: `{name}` is not a metric the oracle exports"
            ));
        }
    }
    problems
}

#[test]
fn the_alert_rules_read_only_what_the_oracle_exports_and_compose_loads_them() {
    let text = read(ALERTS);
    assert!(alert_rules(&text).len() >= 9, "{:?}", alert_rules(&text));
    assert_eq!(alert_problems(&text), Vec::<String>::new());
    // The check can fail: a misspelt metric, a multi-line expression's second line.
    let misspelt = text.replacen("oracle_open_migrations", "oracle_open_migration", 1);
    assert_eq!(alert_problems(&misspelt).len(), 1);
    let second_line = text.replacen(
        "/ max by (instance) (oracle_store_pool_max_connections)",
        "/ max by (instance) (oracle_store_pool_size)",
        1,
    );
    assert_eq!(alert_problems(&second_line).len(), 1);

    let compose = read("deploy/docker-compose.yml");
    assert!(compose.contains("./prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro"));
    let prometheus = read("deploy/prometheus/prometheus.yml");
    assert!(
        prometheus.contains("rule_files:") && prometheus.contains("/etc/prometheus/alerts.yml")
    );
}

/// Every alert links its runbook (`docs/runbooks/<alert>.md`, a path in the repository that
/// operators prefix with where they host the docs), and the runbook is there.
#[test]
fn every_alert_has_a_runbook_of_its_name() {
    let text = read(ALERTS);
    let alerts: Vec<&str> = text.split("- alert: ").skip(1).collect();
    assert!(alerts.len() >= 20, "{} alerts", alerts.len());
    for rule in alerts {
        let name = rule.lines().next().unwrap().trim();
        let path = format!("docs/runbooks/{name}.md");
        assert!(
            rule.contains(&format!("runbook_url: \"{path}\"")),
            "{name} links no runbook at {path}"
        );
        let runbook = read(&path);
        assert!(
            ["What it means", "How to confirm", "What to do"]
                .iter()
                .all(|section| runbook.contains(section)),
            "{path} lacks a section"
        );
    }
}
