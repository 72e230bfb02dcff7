//! fleet.clock: the nodes' wall clocks agree with node 0's.

use super::{Fleet, FleetCheck};
use crate::domain::text;
use crate::identity::check;
use crate::Outcome;

/// Above this offset timeouts and log timestamps stop lining up between
/// nodes (torch's store and NCCL watchdog timeouts are per node, but people
/// read merged logs by timestamp; NTP keeps healthy clocks within
/// milliseconds).
pub const CLOCK_WARN_S: f64 = 1.0;

check!(
    Clock,
    "fleet.clock",
    "Node clocks agree",
    "Each node's wall clock is within 1 s of node rank 0's. Measured at the rendezvous \
through torch.distributed's store: node 0 writes its clock into the store every few \
milliseconds while it waits; each node reads it several times, brackets each read with its \
own clock and keeps the read with the shortest round trip. The offset is exact to half that \
round trip plus node 0's write interval, which the report gives as ± uncertainty.

Why it matters: merged logs and traces across nodes are read by timestamp; a node minutes \
off makes a hang look like it happened elsewhere, and certificate checks, Kerberos and \
some storage fail outright on skewed clocks.

Fix: run NTP (chrony, systemd-timesyncd) on every node, pointed at the same servers; \
`chronyc tracking` shows the local offset.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

impl FleetCheck for Clock {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        evaluate(fleet)
    }
}

fn evaluate(fleet: &Fleet) -> Outcome {
    let measured: Vec<(&super::FleetNode, f64, f64)> = fleet
        .nodes
        .iter()
        .filter_map(|n| n.clock.map(|c| (n, c.offset_s, c.uncertainty_s)))
        .collect();
    if measured.is_empty() {
        return Outcome::skip(if fleet.nodes.len() <= 1 {
            "one node: no clock to compare with node 0's".to_string()
        } else {
            "no node measured its clock against node 0's".to_string()
        });
    }
    let worst =
        measured
            .iter()
            .copied()
            .fold(None::<(&super::FleetNode, f64, f64)>, |w, m| match w {
                Some(w) if w.1.abs() >= m.1.abs() => Some(w),
                _ => Some(m),
            });
    let Some((node, offset, uncertainty)) = worst else {
        return Outcome::skip("no clock offset measured");
    };
    let stated = format!(
        "{} s ± {} s",
        text::seconds((offset * 1000.0).round() / 1000.0),
        text::seconds((uncertainty * 1000.0).round().max(1.0) / 1000.0)
    );
    let off: Vec<String> = measured
        .iter()
        .filter(|(_, o, u)| o.abs() - u > CLOCK_WARN_S)
        .map(|(n, o, _)| format!("{} is {} s off", n.label(), text::seconds(o.abs().round())))
        .collect();
    if off.is_empty() {
        return Outcome::pass(format!(
            "largest offset from node 0's clock: {stated} ({})",
            node.label()
        ))
        .with_metric("clock_offset_max", offset.abs(), "s");
    }
    Outcome::warn(
        format!(
            "clocks differ from node 0's by more than {} s: {}",
            CLOCK_WARN_S,
            off.join(", ")
        ),
        "run NTP (chrony) on every node against the same servers; `chronyc tracking` shows the \
         local offset",
    )
    .with_metric("clock_offset_max", offset.abs(), "s")
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::ClockReading;
    use super::*;
    use crate::Status;

    fn clocked(rank: u32, offset_s: f64) -> super::super::FleetNode {
        let mut n = node(rank, &format!("n{rank}"));
        n.clock = Some(ClockReading {
            offset_s,
            uncertainty_s: 0.002,
        });
        n
    }

    #[test]
    fn a_node_seconds_off_warns_naming_it() {
        let o = evaluate(&fleet(vec![
            node(0, "n0"),
            clocked(1, 0.01),
            clocked(2, -4.2),
        ]));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "clocks differ from node 0's by more than 1 s: node 2 (n2) is 4 s off"
        );
    }

    #[test]
    fn small_offsets_pass_with_the_largest_and_its_uncertainty() {
        let o = evaluate(&fleet(vec![
            node(0, "n0"),
            clocked(1, 0.0123),
            clocked(2, -0.003),
        ]));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "largest offset from node 0's clock: 0.012 s ± 0.002 s (node 1 (n1))"
        );
        assert_eq!(evaluate(&fleet(vec![node(0, "n0")])).status, Status::Skip);
    }
}
