//! Benchmark of node 0's merge in a job watched across nodes: NODES
//! generated node summaries of RANKS ranks each (the JSON each node sends
//! through the store, frames and source lines included), read, merged and
//! judged by `domain::watch` for ROUNDS periods in a row. Prints the
//! summary's size per rank, each period's time and the peak RSS; a
//! benchmark, not a test (`scripts/bench-watch-merge.sh` runs it).
//!   cargo run --release -p gpucheck-checks --example bench_watch_merge -- [NODES] [RANKS] [ROUNDS]

use std::time::Instant;

use gpucheck_checks::domain::stacks::{Activity, Frame, Where};
use gpucheck_checks::domain::watch::{Sample, Watcher};
use gpucheck_checks::domain::watch_late::{Entered, ENTERED_KEPT};
use gpucheck_checks::domain::watch_summary::{Merge, NodeSummary};

fn arg(i: usize, default: u32) -> u32 {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// One rank's sample as a watch reads it: every rank in backward but one
/// asleep on the last node, each with the frame and source line py-spy
/// gives, a recorder number that moves every period and its last 16
/// collectives' entry times.
fn sample(rank: u32, round: u64, asleep: bool) -> Sample {
    let (activity, function, line, code) = if asleep {
        (Activity::Sleep, "main", 88, "time.sleep(3600)")
    } else {
        (Activity::Backward, "train_step", 101, "loss.backward()")
    };
    Sample {
        rank,
        state: 'S',
        cpu_s: 1000.0 + round as f64 * 2.5 + rank as f64 * 1e-3,
        switches: Some(50_000 + round * 400),
        at: Some(Where {
            activity,
            frame: Some(Frame {
                function: function.into(),
                file: "/workspace/project/training/train_llm.py".into(),
                line,
                code: Some(code.into()),
                not_read: None,
            }),
        }),
        recorder: Some(round * 64 + 17),
        entered: (0..ENTERED_KEPT as u64)
            .map(|i| Entered {
                group: "0".into(),
                seq: round * 64 + i,
                at_ms: 1.8e12 + (round * 64 + i) as f64 * 12.0 + f64::from(rank) * 0.05,
            })
            .collect(),
        gpu_pct: Some(97),
    }
}

/// What node `node` writes into the store at `round`.
fn summary_json(node: u32, ranks: u32, round: u64, nodes: u32) -> String {
    let samples = (0..ranks)
        .map(|i| {
            let rank = node * ranks + i;
            sample(rank, round, node + 1 == nodes && i == 0)
        })
        .collect();
    let s = NodeSummary {
        node,
        host: format!("gpu-node-{node:04}.cluster.example.org"),
        round,
        samples,
        ended: Vec::new(),
        diagnosis: None,
    };
    serde_json::to_string(&s).expect("a summary serializes")
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn main() {
    let (nodes, ranks, rounds) = (arg(1, 1000), arg(2, 8), arg(3, 5));
    let mut merge = Merge::default();
    let mut watcher = Watcher::new(Some(60.0));
    let mut times = Vec::new();
    let mut bytes = 0;
    for round in 1..=rounds as u64 {
        // What the store holds this period: generated before the clock runs.
        let lines: Vec<String> = (0..nodes)
            .map(|n| summary_json(n, ranks, round, nodes))
            .collect();
        bytes = lines.iter().map(String::len).sum::<usize>();
        let t = Instant::now();
        for line in &lines {
            let s: NodeSummary = serde_json::from_str(line).expect("a summary reads back");
            merge
                .take(round as f64 * 5.0, s)
                .expect("a newer round is taken");
        }
        let all = merge.samples();
        let events = watcher.observe(round as f64 * 5.0, &all);
        times.push(t.elapsed().as_secs_f64());
        assert_eq!(all.len(), (nodes * ranks) as usize);
        std::hint::black_box(events);
    }
    let per_rank = bytes as f64 / f64::from(nodes * ranks);
    println!("nodes {nodes} x ranks {ranks}: {bytes} bytes of summaries a period ({per_rank:.0} bytes a rank)");
    for (i, t) in times.iter().enumerate() {
        println!(
            "period {}: read, merged and judged in {:.1} ms",
            i + 1,
            t * 1000.0
        );
    }
    println!("peak RSS {:.1} MiB", peak_rss_mib());
}
