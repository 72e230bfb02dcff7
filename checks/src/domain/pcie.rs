//! What a PCIe link carries: the one table every check that judges a
//! PCIe figure reads (host copies, the all-reduce reference, GPU-to-GPU
//! copies).

/// Effective data rate of one PCIe lane per direction, GB/s, by generation:
/// the transfer rate less line-code overhead (PCI-SIG base specifications:
/// Gen1/2 2.5/5 GT/s with 8b/10b, Gen3/4/5 8/16/32 GT/s with 128b/130b,
/// Gen6 64 GT/s PAM4 with 242/256 FLIT encoding).
const LANE_GBPS: [(u32, f64); 6] = [
    (1, 0.25),
    (2, 0.5),
    (3, 0.985),
    (4, 1.969),
    (5, 3.938),
    (6, 7.563),
];

/// One lane of generation `gen`, GB/s per direction; None for a generation
/// the table lacks.
fn lane_gbps(gen: u32) -> Option<f64> {
    LANE_GBPS.iter().find(|(g, _)| *g == gen).map(|(_, r)| *r)
}

/// What a PCIe link of `gen` x `width` carries per direction, GB/s.
pub fn link_gbps(gen: u32, width: u32) -> Option<f64> {
    Some(lane_gbps(gen)? * f64::from(width))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gen5_x16_link_carries_63_gbps() {
        assert_eq!(link_gbps(5, 16).map(f64::round), Some(63.0));
        assert_eq!(link_gbps(3, 16).map(f64::round), Some(16.0));
        assert_eq!(lane_gbps(1), Some(0.25));
        assert_eq!(link_gbps(9, 16), None);
    }
}
