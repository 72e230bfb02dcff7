//! fleet.gpu_load: every GPU's figures under load (gpu.compute's GEMM
//! TFLOPS, gpu.memory's copy and triad GB/s) against the fleet's median
//! for its model, over every GPU of every node.

use super::{nodes_phrase, Fleet, FleetCheck, FleetNode};
use crate::domain::qualify::{below_siblings, median, memory_gbps, tflops};
use crate::domain::text;
use crate::facts::load::{ComputeLoad, LoadFigures, LoadGpu, MemoryLoad};
use crate::identity::check;
use crate::probe::load::LoadDevice;
use crate::Outcome;

/// At most this many slow GPUs (or slow nodes) are named in the summary.
pub const MAX_NAMED: usize = 6;

check!(
    GpuLoad,
    "fleet.gpu_load",
    "No GPU of the fleet slower than its model's fleet median",
    "Compares every GPU of every node with the GPUs of its model across the whole fleet: \
gpu.compute's bf16 and TF32 GEMM TFLOPS and gpu.memory's copy and triad GB/s, each against the \
fleet's median of that figure over every GPU of the same model (NVML's name). A GPU below 85% \
of it fails, naming the node, the GPU, the figure and the median (the slowest first; when every \
GPU of a node is slow, the node). Figures taken with the CPU standing in for the GPUs \
(GPUCHECK_LOAD_DEVICE=cpu, gpucheck's tests) are compared only with each other, against a floor \
of 50%. Under `--profile burn` the figures are gpu.burn's: each GPU's median bf16 TFLOPS and \
triad GB/s over its rounds. It needs `gpucheck cluster --profile full` (or --only \
gpu.compute,gpu.memory) or `--profile burn`: without \
those checks there are no figures, and it skips; a node that did not run them is named. A model \
with a single GPU in the fleet has nothing to compare with, and with two nodes of a model the \
median lies halfway between them, so a node whose GPUs are all slow is named only below about \
74% of the other's.

Why it matters: DDP runs every step at the speed of its slowest rank, so one slow GPU slows the \
whole job, on every node. gpu.compute and gpu.memory already compare a node's GPUs with their \
siblings in the same node, but a node whose GPUs are all slow alike (a power cap set by the BMC, \
a hot rack, a lower clock policy) passes that comparison; only the other nodes show it.

Fix: on the node named, `gpucheck --profile full --only gpu.compute` (or gpu.memory) shows the GPU \
and the cause NVML sees under load; `dcgmi diag -r 3 -i N` runs NVIDIA's diagnostic on it; check \
the power limit, clocks and cooling (`nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE`), and \
drain the node from the job until it measures like the rest.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

impl FleetCheck for GpuLoad {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        evaluate(fleet)
    }
}

/// A figure compared across the fleet.
#[derive(Debug)]
pub struct Figure {
    /// "bf16 GEMM", "memory triad".
    pub what: &'static str,
    pub unit: &'static str,
    /// The check that measures it.
    pub check: &'static str,
    pub pick: fn(&LoadGpu) -> Option<f64>,
}

pub static FIGURES: [Figure; 4] = [
    Figure {
        what: "bf16 GEMM",
        unit: "TFLOPS",
        check: "gpu.compute",
        pick: |g| g.bf16_tflops,
    },
    Figure {
        what: "TF32 GEMM",
        unit: "TFLOPS",
        check: "gpu.compute",
        pick: |g| g.tf32_tflops,
    },
    Figure {
        what: "memory copy",
        unit: "GB/s",
        check: "gpu.memory",
        pick: |g| g.copy_gbps,
    },
    Figure {
        what: "memory triad",
        unit: "GB/s",
        check: "gpu.memory",
        pick: |g| g.triad_gbps,
    },
];

impl Figure {
    /// "712 TFLOPS", "0.215 TFLOPS", "2,950 GB/s", "12.3 GB/s".
    pub fn show(&self, v: f64) -> String {
        let n = match self.unit {
            "TFLOPS" => tflops(v),
            _ => memory_gbps(v),
        };
        format!("{n} {}", self.unit)
    }
}

/// One GPU's figure on one node.
#[derive(Debug, Clone, Copy)]
struct Member<'a> {
    node: &'a FleetNode,
    gpu: &'a LoadGpu,
    value: f64,
}

/// Every GPU of one model with one figure, measured on one kind of device.
struct Group<'a> {
    figure: &'static Figure,
    model: &'a str,
    device: LoadDevice,
    members: Vec<Member<'a>>,
}

impl Group<'_> {
    fn floor(&self) -> f64 {
        self.device.sibling_floor()
    }
}

/// One GPU below its model's fleet median: its worst figure.
#[derive(Debug, Clone)]
struct Slow<'a> {
    member: Member<'a>,
    figure: &'static Figure,
    median: f64,
    of: usize,
    model: &'a str,
}

impl Slow<'_> {
    fn share(&self) -> f64 {
        self.member.value / self.median
    }

    /// "bf16 GEMM 612 TFLOPS, 71% of the fleet median 861 TFLOPS of 16 NVIDIA H100 80GB HBM3".
    fn figure_phrase(&self) -> String {
        format!(
            "{} {}, {:.0}% of the fleet median {} of {} {}",
            self.figure.what,
            self.figure.show(self.member.value),
            100.0 * self.share(),
            self.figure.show(self.median),
            self.of,
            self.model
        )
    }
}

/// What each node published: its compute and its memory figures.
struct NodeLoad<'a> {
    node: &'a FleetNode,
    compute: Option<LoadFigures>,
    memory: Option<LoadFigures>,
}

fn node_loads(fleet: &Fleet) -> Vec<NodeLoad<'_>> {
    fleet
        .nodes
        .iter()
        .map(|node| NodeLoad {
            node,
            compute: node.fact::<ComputeLoad>().map(|f| f.0),
            memory: node.fact::<MemoryLoad>().map(|f| f.0),
        })
        .collect()
}

/// Every figure of every GPU, grouped by (figure, model, device), in the
/// order first seen.
fn groups<'a>(loads: &'a [NodeLoad<'a>]) -> Vec<Group<'a>> {
    let mut out: Vec<Group<'a>> = Vec::new();
    for figure in &FIGURES {
        for load in loads {
            let figures = match figure.check {
                "gpu.compute" => load.compute.as_ref(),
                _ => load.memory.as_ref(),
            };
            let Some(figures) = figures else { continue };
            for gpu in &figures.gpus {
                let Some(value) = (figure.pick)(gpu).filter(|v| v.is_finite()) else {
                    continue;
                };
                let member = Member {
                    node: load.node,
                    gpu,
                    value,
                };
                let same = |g: &&mut Group| {
                    std::ptr::eq(g.figure, figure)
                        && g.model == gpu.name
                        && g.device == figures.device
                };
                match out.iter_mut().find(same) {
                    Some(g) => g.members.push(member),
                    None => out.push(Group {
                        figure,
                        model: &gpu.name,
                        device: figures.device,
                        members: vec![member],
                    }),
                }
            }
        }
    }
    out
}

/// Each GPU below its group's floor, once, with its worst figure; the
/// slowest first.
fn slow_gpus<'a>(groups: &[Group<'a>]) -> Vec<Slow<'a>> {
    let mut slow: Vec<Slow<'a>> = Vec::new();
    for g in groups {
        let all: Vec<f64> = g.members.iter().map(|m| m.value).collect();
        for m in &g.members {
            let Some(below) = below_siblings(m.value, &all, g.floor()) else {
                continue;
            };
            let found = Slow {
                member: *m,
                figure: g.figure,
                median: below.median,
                of: g.members.len(),
                model: g.model,
            };
            let same = |s: &Slow| same_gpu(&s.member, m);
            match slow.iter_mut().find(|s| same(s)) {
                Some(s) if s.share() > found.share() => *s = found,
                Some(_) => {}
                None => slow.push(found),
            }
        }
    }
    slow.sort_by(|a, b| a.share().total_cmp(&b.share()));
    slow
}

fn same_gpu(a: &Member, b: &Member) -> bool {
    std::ptr::eq(a.node, b.node) && a.gpu.index == b.gpu.index
}

/// The GPUs of `node` that have something to compare with (their model
/// has two GPUs or more in the fleet in some figure).
fn compared_on<'a>(groups: &[Group<'a>], node: &FleetNode) -> Vec<u32> {
    let mut ids: Vec<u32> = groups
        .iter()
        .filter(|g| g.members.len() >= 2)
        .flat_map(|g| g.members.iter())
        .filter(|m| std::ptr::eq(m.node, node))
        .map(|m| m.gpu.index)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// One line of the failure: a slow GPU, or a node whose every GPU is slow
/// (then its slowest).
struct Named<'a> {
    slowest: Slow<'a>,
    /// Every GPU of the node is slow: how many.
    whole_node: Option<usize>,
}

impl Named<'_> {
    /// "node 2 (gpu-003) GPU 5: bf16 GEMM ...", "node 2 (gpu-003): all 8
    /// GPUs slow, the slowest GPU 5: bf16 GEMM ...".
    fn phrase(&self) -> String {
        let s = &self.slowest;
        match self.whole_node {
            Some(n) => format!(
                "{}: all {n} GPUs slow, the slowest GPU {}: {}",
                s.member.node.label(),
                s.member.gpu.index,
                s.figure_phrase()
            ),
            None => format!(
                "{} GPU {}: {}",
                s.member.node.label(),
                s.member.gpu.index,
                s.figure_phrase()
            ),
        }
    }
}

/// The slow GPUs as they are named: a node whose every compared GPU (two
/// or more) is slow once, as a node; the others one by one.
fn named<'a>(groups: &[Group<'a>], slow: &[Slow<'a>]) -> Vec<Named<'a>> {
    let mut out: Vec<Named<'a>> = Vec::new();
    for s in slow {
        let node = s.member.node;
        if out
            .iter()
            .any(|n| n.whole_node.is_some() && std::ptr::eq(n.slowest.member.node, node))
        {
            continue;
        }
        let compared = compared_on(groups, node);
        let slow_here = slow
            .iter()
            .filter(|o| std::ptr::eq(o.member.node, node))
            .count();
        let whole = compared.len() >= 2 && slow_here == compared.len();
        out.push(Named {
            slowest: s.clone(),
            whole_node: whole.then_some(slow_here),
        });
    }
    out
}

/// The checks that publish figures under load.
const LOAD_CHECKS: [&str; 3] = ["gpu.compute", "gpu.memory", "gpu.burn"];

/// The nodes with no figures: those that did not run the load checks and
/// those that ran them without a figure ("node 1 (b) did not run
/// gpu.compute, gpu.memory or gpu.burn").
fn absent_notes(loads: &[NodeLoad]) -> Vec<String> {
    let without: Vec<&NodeLoad> = loads
        .iter()
        .filter(|l| l.compute.is_none() && l.memory.is_none())
        .collect();
    let ran = |l: &NodeLoad| {
        l.node
            .results
            .iter()
            .any(|(id, _)| LOAD_CHECKS.contains(&id.as_str()))
    };
    let not_run: Vec<&FleetNode> = without.iter().filter(|l| !ran(l)).map(|l| l.node).collect();
    let no_figures: Vec<&FleetNode> = without.iter().filter(|l| ran(l)).map(|l| l.node).collect();
    let mut notes = Vec::new();
    if !not_run.is_empty() {
        notes.push(format!(
            "{} did not run gpu.compute, gpu.memory or gpu.burn",
            nodes_phrase(&not_run)
        ));
    }
    if !no_figures.is_empty() {
        notes.push(format!(
            "{} ran them without a figure (their own reports say why)",
            nodes_phrase(&no_figures)
        ));
    }
    notes
}

/// Models with a single GPU in the fleet: "1 NVIDIA A10 in the fleet:
/// nothing to compare it with".
fn single_notes(groups: &[Group]) -> Vec<String> {
    let mut models: Vec<&str> = Vec::new();
    for g in groups {
        let compared = groups
            .iter()
            .any(|o| o.model == g.model && o.device == g.device && o.members.len() >= 2);
        if !compared && !models.contains(&g.model) {
            models.push(g.model);
        }
    }
    models
        .iter()
        .map(|m| format!("1 {m} in the fleet: nothing to compare it with"))
        .collect()
}

/// " (note; note)" or "".
fn bracketed(notes: &[String]) -> String {
    if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    }
}

/// Judge every GPU of the fleet against its model's fleet median.
pub fn evaluate(fleet: &Fleet) -> Outcome {
    let loads = node_loads(fleet);
    let groups = groups(&loads);
    let mut notes = absent_notes(&loads);
    if groups.is_empty() {
        return Outcome::skip(format!(
            "no GPU figures under load: gpu.compute and gpu.memory run under --profile full \
             (`gpucheck cluster --profile full`), gpu.burn under --profile burn{}",
            bracketed(&notes)
        ));
    }
    notes.extend(single_notes(&groups));
    if groups.iter().all(|g| g.members.len() < 2) {
        return Outcome::skip(format!(
            "no GPU to compare with another of its model{}",
            bracketed(&notes)
        ));
    }
    let slow = slow_gpus(&groups);
    if slow.is_empty() {
        return Outcome::pass(format!("{}{}", pass_summary(&groups), bracketed(&notes)));
    }
    let named = named(&groups, &slow);
    let mut lines: Vec<String> = named.iter().take(MAX_NAMED).map(Named::phrase).collect();
    if named.len() > MAX_NAMED {
        let more: usize = named[MAX_NAMED..]
            .iter()
            .map(|n| n.whole_node.unwrap_or(1))
            .sum();
        lines.push(format!("and {more} more slow GPU{}", text::plural(more)));
    }
    Outcome::fail(
        format!("{}{}", lines.join("; "), bracketed(&notes)),
        hint(&named),
    )
}

/// "16 GPUs on 2 nodes within 85% of their model's fleet median: 16 NVIDIA
/// H100 80GB HBM3: bf16 GEMM 861 TFLOPS, TF32 GEMM 402 TFLOPS, ...".
fn pass_summary(groups: &[Group]) -> String {
    let compared: Vec<&Group> = groups.iter().filter(|g| g.members.len() >= 2).collect();
    let mut gpus: Vec<Member> = Vec::new();
    for m in compared.iter().flat_map(|g| g.members.iter()) {
        if !gpus.iter().any(|o| same_gpu(o, m)) {
            gpus.push(*m);
        }
    }
    let mut nodes: Vec<u32> = gpus.iter().map(|m| m.node.node_rank).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut floors: Vec<String> = Vec::new();
    let mut models: Vec<String> = Vec::new();
    for g in &compared {
        let floor = format!("{:.0}%", 100.0 * g.floor());
        if !floors.contains(&floor) {
            floors.push(floor);
        }
        let head = model_head(&compared, g);
        let median = median(&g.members.iter().map(|m| m.value).collect::<Vec<_>>());
        let figure = format!(
            "{} {}",
            g.figure.what,
            median.map_or_else(|| "-".into(), |v| g.figure.show(v))
        );
        match models.iter_mut().find(|m| m.starts_with(&head)) {
            Some(m) => m.push_str(&format!(", {figure}")),
            None => models.push(format!("{head}{figure}")),
        }
    }
    format!(
        "{} on {} within {} of their model's fleet median: {}",
        text::gpu_count(gpus.len()),
        text::counted(nodes.len(), "node", "nodes"),
        floors.join(" / "),
        models.join("; ")
    )
}

/// "16 NVIDIA H100 80GB HBM3: ", "2 NVIDIA H100 80GB HBM3 (load on the CPU): ".
fn model_head(compared: &[&Group], g: &Group) -> String {
    let count = compared
        .iter()
        .filter(|o| o.model == g.model && o.device == g.device)
        .map(|o| o.members.len())
        .max()
        .unwrap_or(0);
    let on_cpu = match g.device {
        LoadDevice::Cpu => " (load on the CPU)",
        LoadDevice::Cuda => "",
    };
    format!("{count} {}{on_cpu}: ", g.model)
}

/// What to do about the slowest GPU (or node) named, on its node.
fn hint(named: &[Named]) -> String {
    let Some(first) = named.first() else {
        return String::new();
    };
    let s = &first.slowest;
    let (node, i) = (s.member.node, s.member.gpu.index);
    let host = &node.hostname;
    let uuid = s
        .member
        .gpu
        .uuid
        .as_ref()
        .map_or_else(String::new, |u| format!(" ({u})"));
    let what = match first.whole_node {
        Some(_) => format!(
            "every GPU of {} is slower than the {} of the other nodes, so the node holds them \
             down: check what they share (the node's power capping and supply, cooling and \
             fans: `nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE` on {host}), run `dcgmi \
             diag -r 3` there",
            node.label(),
            s.model
        ),
        None => format!(
            "{} GPU {i}{uuid} is slower than the other {} of the fleet, and every DDP step \
             waits for it: on {host}, `gpucheck --profile full --only {}` shows \
             it against its siblings and the cause NVML sees under load, and `dcgmi diag -r 3 \
             -i {i}` runs NVIDIA's diagnostic on it; check its power limit, clocks and cooling \
             (`nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE -i {i}`)",
            node.label(),
            s.model,
            s.figure.check
        ),
    };
    let others = if named.len() > 1 {
        "; the same for each one named"
    } else {
        ""
    };
    format!("{what}; drain the node from the job until it measures like the rest{others}")
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::Status;

    const H100: &str = "NVIDIA H100 80GB HBM3";
    const A100: &str = "NVIDIA A100-SXM4-80GB";

    fn gpus(rank: u32, model: &str, values: &[f64]) -> Vec<(LoadGpu, Option<f64>, Option<f64>)> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let uuid = format!("GPU-{rank}-{i}");
                (
                    LoadGpu::new(i as u32, model, Some(&uuid)),
                    Some(*v),
                    Some(v / 2.0),
                )
            })
            .collect()
    }

    /// A node whose gpu.compute measured `bf16` (TF32 half of it) on GPUs 0..
    fn computed(rank: u32, model: &str, bf16: &[f64]) -> FleetNode {
        let fact = ComputeLoad::new(LoadDevice::Cuda, gpus(rank, model, bf16));
        with_fact(node(rank, &host(rank)), "gpu.compute", &fact)
    }

    /// Add gpu.memory's figures: `triad` GB/s, the copy twice it.
    fn with_memory(n: FleetNode, model: &str, triad: &[f64]) -> FleetNode {
        let list = gpus(n.node_rank, model, triad)
            .into_iter()
            .map(|(g, t, _)| (g, t.map(|t| 2.0 * t), t));
        with_fact(n, "gpu.memory", &MemoryLoad::new(LoadDevice::Cuda, list))
    }

    fn host(rank: u32) -> String {
        format!("gpu-{:03}", rank + 1)
    }

    fn even(n: usize, v: f64) -> Vec<f64> {
        vec![v; n]
    }

    #[test]
    fn a_slow_gpu_on_one_node_is_named_with_its_figure_and_the_fleet_median() {
        let mut slow = even(8, 860.0);
        slow[5] = 612.0;
        let o = evaluate(&fleet(vec![
            computed(0, H100, &even(8, 860.0)),
            computed(1, H100, &slow),
        ]));
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert_eq!(
            o.summary,
            "node 1 (gpu-002) GPU 5: bf16 GEMM 612 TFLOPS, 71% of the fleet median 860 TFLOPS \
             of 16 NVIDIA H100 80GB HBM3"
        );
        let hint = o.hint.as_deref().unwrap_or_default();
        assert!(
            hint.starts_with(
                "node 1 (gpu-002) GPU 5 (GPU-1-5) is slower than the other NVIDIA H100 80GB HBM3 \
                 of the fleet, and every DDP step waits for it"
            ),
            "{hint}"
        );
        assert!(
            hint.contains("on gpu-002, `gpucheck --profile full --only gpu.compute`"),
            "{hint}"
        );
        assert!(hint.contains("`dcgmi diag -r 3 -i 5`"), "{hint}");
        assert!(hint.ends_with("drain the node from the job until it measures like the rest"));
    }

    #[test]
    fn a_node_whose_every_gpu_is_slow_alike_is_named_as_a_node() {
        // Its GPUs agree with each other: gpu.compute on that node passes.
        let mut slow = even(4, 600.0);
        slow[2] = 590.0;
        let o = evaluate(&fleet(vec![
            computed(0, H100, &even(4, 860.0)),
            computed(1, H100, &even(4, 858.0)),
            computed(2, H100, &slow),
        ]));
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert_eq!(
            o.summary,
            "node 2 (gpu-003): all 4 GPUs slow, the slowest GPU 2: bf16 GEMM 590 TFLOPS, 69% of \
             the fleet median 858 TFLOPS of 12 NVIDIA H100 80GB HBM3"
        );
        let hint = o.hint.as_deref().unwrap_or_default();
        assert!(
            hint.starts_with(
                "every GPU of node 2 (gpu-003) is slower than the NVIDIA H100 80GB HBM3 of the \
                 other nodes, so the node holds them down"
            ),
            "{hint}"
        );
        assert!(hint.contains("on gpu-003"), "{hint}");
    }

    #[test]
    fn of_two_nodes_the_one_at_70_percent_of_the_other_is_named() {
        // The median lies between them: 700 of 850 is 82%.
        let o = evaluate(&fleet(vec![
            computed(0, H100, &even(4, 1000.0)),
            computed(1, H100, &even(4, 700.0)),
        ]));
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert_eq!(
            o.summary,
            "node 1 (gpu-002): all 4 GPUs slow, the slowest GPU 0: bf16 GEMM 700 TFLOPS, 82% of \
             the fleet median 850 TFLOPS of 8 NVIDIA H100 80GB HBM3"
        );
    }

    #[test]
    fn several_slow_gpus_are_all_named_slowest_first() {
        let mut a = even(4, 860.0);
        a[1] = 700.0;
        let mut b = even(4, 860.0);
        b[3] = 500.0;
        let o = evaluate(&fleet(vec![
            computed(0, H100, &a),
            computed(1, H100, &b),
            computed(2, H100, &even(4, 860.0)),
        ]));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "node 1 (gpu-002) GPU 3: bf16 GEMM 500 TFLOPS, 58% of the fleet median 860 TFLOPS of \
             12 NVIDIA H100 80GB HBM3; node 0 (gpu-001) GPU 1: bf16 GEMM 700 TFLOPS, 81% of the \
             fleet median 860 TFLOPS of 12 NVIDIA H100 80GB HBM3"
        );
        assert!(o
            .hint
            .as_deref()
            .unwrap_or_default()
            .ends_with("; the same for each one named"));
    }

    #[test]
    fn the_list_of_slow_gpus_is_bounded() {
        let mut nodes: Vec<FleetNode> =
            (0..4).map(|r| computed(r, H100, &even(8, 860.0))).collect();
        // Ten slow GPUs over two nodes, neither node slow as a whole.
        let mut a = even(8, 860.0);
        let mut b = even(8, 860.0);
        for i in 0..5 {
            a[i] = 500.0 + i as f64;
            b[i] = 600.0 + i as f64;
        }
        nodes.push(computed(4, H100, &a));
        nodes.push(computed(5, H100, &b));
        let o = evaluate(&fleet(nodes));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary.matches(" GPU ").count(),
            MAX_NAMED,
            "{}",
            o.summary
        );
        assert!(o
            .summary
            .starts_with("node 4 (gpu-005) GPU 0: bf16 GEMM 500 TFLOPS"));
        assert!(
            o.summary.ends_with("; and 4 more slow GPUs"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn each_model_is_judged_against_its_own_fleet_median() {
        let mut a100 = even(4, 282.0);
        a100[0] = 200.0;
        let o = evaluate(&fleet(vec![
            computed(0, H100, &even(4, 860.0)),
            computed(1, A100, &even(4, 282.0)),
            computed(2, A100, &a100),
        ]));
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert_eq!(
            o.summary,
            "node 2 (gpu-003) GPU 0: bf16 GEMM 200 TFLOPS, 71% of the fleet median 282 TFLOPS of \
             8 NVIDIA A100-SXM4-80GB"
        );
        a100[0] = 279.0;
        let o = evaluate(&fleet(vec![
            computed(0, H100, &even(4, 860.0)),
            computed(1, A100, &even(4, 282.0)),
            computed(2, A100, &a100),
        ]));
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert_eq!(
            o.summary,
            "12 GPUs on 3 nodes within 85% of their model's fleet median: 4 NVIDIA H100 80GB \
             HBM3: bf16 GEMM 860 TFLOPS, TF32 GEMM 430 TFLOPS; 8 NVIDIA A100-SXM4-80GB: bf16 \
             GEMM 282 TFLOPS, TF32 GEMM 141 TFLOPS"
        );
    }

    #[test]
    fn an_even_fleet_passes_with_every_median() {
        let nodes = (0..2)
            .map(|r| with_memory(computed(r, H100, &even(8, 860.0)), H100, &even(8, 3010.0)))
            .collect();
        let o = evaluate(&fleet(nodes));
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert_eq!(
            o.summary,
            "16 GPUs on 2 nodes within 85% of their model's fleet median: 16 NVIDIA H100 80GB \
             HBM3: bf16 GEMM 860 TFLOPS, TF32 GEMM 430 TFLOPS, memory copy 6,020 GB/s, memory \
             triad 3,010 GB/s"
        );
    }

    #[test]
    fn slow_memory_is_named_by_its_worst_figure_and_the_check_that_shows_it() {
        let mut triad = even(8, 3000.0);
        triad[6] = 1500.0;
        let mut bf16 = even(8, 860.0);
        bf16[6] = 700.0;
        let o = evaluate(&fleet(vec![
            with_memory(computed(0, H100, &even(8, 860.0)), H100, &even(8, 3000.0)),
            with_memory(computed(1, H100, &bf16), H100, &triad),
        ]));
        assert_eq!(o.status, Status::Fail);
        // Named once, by the figure furthest below its median.
        assert_eq!(
            o.summary,
            "node 1 (gpu-002) GPU 6: memory copy 3,000 GB/s, 50% of the fleet median 6,000 GB/s \
             of 16 NVIDIA H100 80GB HBM3"
        );
        assert!(o
            .hint
            .as_deref()
            .unwrap_or_default()
            .contains("`gpucheck --profile full --only gpu.memory`"));
    }

    #[test]
    fn a_gpu_without_a_figure_is_left_out_of_the_median() {
        let mut list = gpus(1, H100, &even(8, 860.0));
        list[2].1 = None;
        list[2].2 = None;
        list[4].1 = Some(600.0);
        let b = with_fact(
            node(1, "gpu-002"),
            "gpu.compute",
            &ComputeLoad::new(LoadDevice::Cuda, list),
        );
        let o = evaluate(&fleet(vec![computed(0, H100, &even(8, 860.0)), b]));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .starts_with("node 1 (gpu-002) GPU 4: bf16 GEMM 600 TFLOPS, 70% of the fleet median 860 TFLOPS of 15 "),
            "{}",
            o.summary
        );
    }

    #[test]
    fn nodes_without_figures_are_noted_and_the_rest_compared() {
        let mut skipped = node(2, "gpu-003");
        skipped.results.push((
            "gpu.compute".into(),
            Outcome::skip("no Python to run the load with"),
        ));
        let o = evaluate(&fleet(vec![
            computed(0, H100, &even(8, 860.0)),
            node(1, "gpu-002"),
            skipped,
            computed(3, H100, &even(8, 860.0)),
        ]));
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(
            o.summary.ends_with(
                " (node 1 (gpu-002) did not run gpu.compute, gpu.memory or gpu.burn; node 2 \
                 (gpu-003) ran them without a figure (their own reports say why))"
            ),
            "{}",
            o.summary
        );
        assert!(
            o.summary.starts_with("16 GPUs on 2 nodes "),
            "{}",
            o.summary
        );
    }

    #[test]
    fn without_the_full_profile_it_skips_saying_where_the_figures_come_from() {
        let o = evaluate(&fleet(vec![node(0, "gpu-001"), node(1, "gpu-002")]));
        assert_eq!(o.status, Status::Skip);
        assert_eq!(
            o.summary,
            "no GPU figures under load: gpu.compute and gpu.memory run under --profile full \
             (`gpucheck cluster --profile full`), gpu.burn under --profile burn (nodes 0, 1 did \
             not run gpu.compute, gpu.memory or gpu.burn)"
        );
    }

    #[test]
    fn a_single_gpu_of_a_model_has_nothing_to_compare_with() {
        let o = evaluate(&fleet(vec![
            computed(0, "NVIDIA H100 PCIe", &[700.0]),
            computed(1, A100, &[100.0]),
        ]));
        assert_eq!(o.status, Status::Skip, "{o:?}");
        assert_eq!(
            o.summary,
            "no GPU to compare with another of its model (1 NVIDIA H100 PCIe in the fleet: \
             nothing to compare it with; 1 NVIDIA A100-SXM4-80GB in the fleet: nothing to \
             compare it with)"
        );
        // Beside models that are compared, it is said and the rest judged.
        let o = evaluate(&fleet(vec![
            computed(0, H100, &even(2, 860.0)),
            computed(1, A100, &[100.0]),
        ]));
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(
            o.summary
                .ends_with(" (1 NVIDIA A100-SXM4-80GB in the fleet: nothing to compare it with)"),
            "{}",
            o.summary
        );
    }

    /// A node whose load ran on the CPU standing in for its GPUs.
    fn on_cpu(rank: u32, bf16: &[f64]) -> FleetNode {
        let fact = ComputeLoad::new(LoadDevice::Cpu, gpus(rank, H100, bf16));
        with_fact(node(rank, &host(rank)), "gpu.compute", &fact)
    }

    #[test]
    fn figures_taken_on_the_cpu_are_judged_against_the_cpu_floor() {
        // 60% of the median passes on the CPU (its figures move by half).
        let o = evaluate(&fleet(vec![
            on_cpu(0, &[0.2]),
            on_cpu(1, &[0.2]),
            on_cpu(2, &[0.12]),
        ]));
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert_eq!(
            o.summary,
            "3 GPUs on 3 nodes within 50% of their model's fleet median: 3 NVIDIA H100 80GB HBM3 \
             (load on the CPU): bf16 GEMM 0.200 TFLOPS, TF32 GEMM 0.100 TFLOPS"
        );
        let o = evaluate(&fleet(vec![on_cpu(0, &[0.2]), on_cpu(1, &[0.03])]));
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert_eq!(
            o.summary,
            "node 1 (gpu-002) GPU 0: bf16 GEMM 0.030 TFLOPS, 26% of the fleet median 0.115 \
             TFLOPS of 2 NVIDIA H100 80GB HBM3"
        );
    }

    #[test]
    fn cpu_figures_are_never_compared_with_gpu_figures() {
        let o = evaluate(&fleet(vec![
            computed(0, H100, &even(2, 860.0)),
            on_cpu(1, &[0.2, 0.2]),
        ]));
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(o.summary.contains(" within 85% / 50% "), "{}", o.summary);
        assert!(
            o.summary.contains("2 NVIDIA H100 80GB HBM3: bf16"),
            "{}",
            o.summary
        );
        assert!(o
            .summary
            .contains("2 NVIDIA H100 80GB HBM3 (load on the CPU): bf16"));
    }

    #[test]
    fn the_figures_a_node_published_are_read_from_its_report() {
        let n = with_memory(computed(0, H100, &[1.0]), H100, &[2.0]);
        let f = fleet(vec![n]);
        let loads = node_loads(&f);
        assert_eq!(
            loads[0].compute.as_ref().map(|f| f.gpus[0].bf16_tflops),
            Some(Some(1.0))
        );
        assert_eq!(
            loads[0].memory.as_ref().map(|f| f.gpus[0].triad_gbps),
            Some(Some(2.0))
        );
    }
}
