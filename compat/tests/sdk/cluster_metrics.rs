//! The `iggyd_cluster_*` Prometheus series of a real three-node cluster:
//! every node's page passes `promtool check metrics`, and the nodes agree
//! with each other the way Raft says they must: every group has exactly
//! one node saying it leads, every node reports the same term for it, and
//! once the producer stops, the leader reports every follower's lag at 0
//! and every node the same commit index.

use crate::cluster::{Cluster, Layout, NODES, STREAM, TOPIC, agreed_leader, client_of};
use crate::common::*;
use iggy::prelude::*;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// One page's samples: (metric name, labels as written) → value.
type Samples = BTreeMap<(String, String), f64>;

/// `GET /metrics` over a plain connection that the server closes after the
/// answer; the body after the blank line.
fn scrape(address: SocketAddr) -> String {
    let mut stream = TcpStream::connect(address).expect("connect to the metrics endpoint");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("the answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// The page's samples of `iggyd_cluster_*` series.
fn cluster_samples(page: &str) -> Samples {
    page.lines()
        .filter(|line| line.starts_with("iggyd_cluster_"))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            Some(((name.to_string(), labels.to_string()), value.parse().ok()?))
        })
        .collect()
}

/// `promtool check metrics` on the page (required under CI=true, where the
/// setup installs it).
fn promtool_check(page: &str) {
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "promtool is missing (apt-get install prometheus)"
        );
        return;
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("page to promtool");
    let output = child.wait_with_output().expect("promtool ran");
    assert!(
        output.status.success(),
        "promtool check metrics:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The value of `name` with `labels` in `samples`.
fn value(samples: &Samples, name: &str, labels: &str) -> Option<f64> {
    samples
        .get(&(name.to_string(), labels.to_string()))
        .copied()
}

/// What the three pages say of every group, or why they do not agree yet.
fn agreement(pages: &[Samples], groups: &[String]) -> Result<(), String> {
    for group in groups {
        let labels = format!("group=\"{group}\"");
        let leaders: Vec<usize> = (0..pages.len())
            .filter(|node| value(&pages[*node], "iggyd_cluster_group_leader", &labels) == Some(1.0))
            .collect();
        let [leader] = leaders[..] else {
            return Err(format!("{group}: nodes saying they lead: {leaders:?}"));
        };
        let terms: Vec<Option<f64>> = pages
            .iter()
            .map(|page| value(page, "iggyd_cluster_group_term", &labels))
            .collect();
        if terms.iter().any(|term| term.is_none() || *term != terms[0]) {
            return Err(format!("{group}: terms {terms:?}"));
        }
        let commits: Vec<Option<f64>> = pages
            .iter()
            .map(|page| value(page, "iggyd_cluster_group_commit_index", &labels))
            .collect();
        if commits
            .iter()
            .any(|commit| commit.is_none() || *commit != commits[0])
        {
            return Err(format!("{group}: commit indexes {commits:?}"));
        }
        let lags: Vec<(String, f64)> = pages[leader]
            .iter()
            .filter(|((name, labels), _)| {
                name == "iggyd_cluster_follower_lag"
                    && labels.starts_with(&format!("group=\"{group}\","))
            })
            .map(|((_, labels), lag)| (labels.clone(), *lag))
            .collect();
        if lags.len() != NODES as usize - 1 || lags.iter().any(|(_, lag)| *lag != 0.0) {
            return Err(format!("{group}: the leader's follower lags {lags:?}"));
        }
    }
    Ok(())
}

// Proves the cluster series of a running cluster are well formed and say
// what Raft guarantees, on every node: one leader per group, one term, one
// commit index and no lag once the writes stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reports_the_groups_raft_agrees_on() {
    let layout = Layout::loopback_with_metrics();
    let cluster = Cluster::start_on(&layout, Some(("500ms", "100ms")));
    let leader = agreed_leader(&cluster, &[1, 2, 3]).await;
    let client = client_of(&cluster, leader).await;
    client.create_stream(STREAM).await.expect("stream");
    client
        .create_topic(&named(STREAM), TOPIC, &topic_options(2))
        .await
        .expect("topic");
    for partition in 0..2 {
        send_to(&client, STREAM, TOPIC, partition, messages("m", 0, 20)).await;
    }
    let metrics = layout.metrics.as_ref().expect("metrics addresses");
    let deadline = Instant::now() + Duration::from_secs(30);
    let groups: Vec<String> = loop {
        let pages: Vec<String> = metrics.iter().map(|address| scrape(*address)).collect();
        let samples: Vec<Samples> = pages.iter().map(|page| cluster_samples(page)).collect();
        // Every group any node reports (the metadata group and the two
        // partitions' groups, by stream/topic/partition id).
        let mut groups: Vec<String> = samples
            .iter()
            .flat_map(|page| page.keys())
            .filter(|(name, _)| name == "iggyd_cluster_group_term")
            .filter_map(|(_, labels)| {
                labels
                    .strip_prefix("group=\"")
                    .and_then(|rest| rest.strip_suffix('"'))
                    .map(str::to_string)
            })
            .collect();
        groups.sort();
        groups.dedup();
        let complete = groups.len() == 3 && groups.iter().any(|group| group == "metadata");
        match agreement(&samples, &groups) {
            Ok(()) if complete => {
                for page in &pages {
                    promtool_check(page);
                }
                break groups;
            }
            outcome => assert!(
                Instant::now() < deadline,
                "the nodes' pages do not agree within 30 s (groups {groups:?}): {outcome:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!("cluster metrics: every node agrees on {groups:?}");
}
