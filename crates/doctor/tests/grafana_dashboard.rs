//! The example Grafana dashboard (`docs/grafana/tcptune.json`) queries only metrics that
//! exist: every `tcptune_watch_*` name in its queries is one `watch --metrics` exports, and
//! every `tcptune_serve_*` name is one `docs/METRICS.md` defines.

use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use tcptune_doctor::watch::metrics::WatchMetrics;

fn repo_file(rel: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// Every `tcptune_*` word in `text`.
fn metric_words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("tcptune_"))
        .map(str::to_string)
        .collect()
}

fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "definition", Value::String(s)) => out.push(s.clone()),
                    _ => exprs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

#[test]
fn the_dashboard_queries_only_metrics_that_exist() {
    let dash: Value = serde_json::from_str(&repo_file("docs/grafana/tcptune.json"))
        .expect("the dashboard is JSON");
    assert_eq!(dash["uid"], "tcptune");
    let mut queries = Vec::new();
    exprs(&dash, &mut queries);
    assert!(queries.len() >= 15, "{queries:?}");

    let mut registry = prometheus_client::registry::Registry::default();
    let m = WatchMetrics::new(5);
    m.register(&mut registry);
    m.update(&[], Duration::from_millis(1));
    let mut exported = String::new();
    prometheus_client::encoding::text::encode(&mut exported, &registry).expect("encode");
    let watch: Vec<String> = exported
        .lines()
        .filter(|l| l.starts_with("# TYPE "))
        .filter_map(|l| l.split(' ').nth(2))
        .flat_map(|n| [n.to_string(), format!("{n}_total")])
        .collect();
    let doc = repo_file("docs/METRICS.md");
    let documented = metric_words(&doc);

    let mut serve_used = 0;
    for q in &queries {
        for w in metric_words(q) {
            if w.starts_with("tcptune_watch_") {
                assert!(watch.contains(&w), "{w} in '{q}' is not exported by watch");
                assert!(documented.contains(&w), "{w} is not in docs/METRICS.md");
            } else {
                serve_used += 1;
                let base = w.strip_suffix("_bucket").unwrap_or(&w);
                assert!(
                    documented.iter().any(|d| d == base),
                    "{w} in '{q}' is not defined in docs/METRICS.md"
                );
            }
        }
    }
    assert!(serve_used >= 6, "the serve row queries serve's metrics");
}
