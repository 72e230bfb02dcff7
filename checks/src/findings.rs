//! One way to turn what a check found into its [`Outcome`]: collect
//! [`Finding`]s (a verdict, a text, an optional hint template, optionally the
//! GPU it is about), then [`Findings::conclude`]: the worst verdict wins, the
//! summary lists the worst findings grouped per GPU, the hint joins each
//! distinct template once with the GPUs it applies to, and the action is
//! the most drastic one a warn-or-worse finding names, with its GPUs.

use crate::domain::action::Action;
use crate::domain::text::gpus_phrase;
use crate::{DeviceResult, Metric, Outcome, Status};

/// Groups shown in a summary before "and N more".
const SUMMARY_GROUPS_SHOWN: usize = 4;

/// One thing a check found.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The GPU (NVML index, or rank) it is about; `None` for the machine.
    pub gpu: Option<u32>,
    pub status: Status,
    pub text: String,
    /// What to do. `{gpus}` becomes "GPU 3" / "GPUs 1, 5" and `{ids}` "1,5",
    /// listing every GPU that shares this hint.
    pub hint: Option<String>,
    /// The repair action; `None` leaves it to the check's default
    /// (`domain::action::DEFAULT_ACTIONS`).
    pub action: Option<Action>,
    /// The network port it is about (`mlx5_0/1`), if any.
    pub port: Option<String>,
}

impl Finding {
    pub fn new(gpu: Option<u32>, status: Status, text: impl Into<String>) -> Self {
        Finding {
            gpu,
            status,
            text: text.into(),
            hint: None,
            action: None,
            port: None,
        }
    }

    pub fn hint(mut self, template: impl Into<String>) -> Self {
        self.hint = Some(template.into());
        self
    }

    /// The repair action this finding calls for.
    pub fn action(mut self, action: Action) -> Self {
        self.action = Some(action);
        self
    }

    /// The network port the finding (and its action) is about.
    pub fn port(mut self, port: impl Into<String>) -> Self {
        self.port = Some(port.into());
        self
    }
}

/// The findings of one check, in the order they were found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Findings {
    pub items: Vec<Finding>,
}

impl Findings {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, finding: Finding) {
        self.items.push(finding);
    }

    /// Add a machine-wide finding with an optional hint.
    pub fn add(&mut self, status: Status, text: impl Into<String>, hint: Option<String>) {
        self.items.push(Finding {
            hint,
            ..Finding::new(None, status, text)
        });
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The worst verdict found (pass when nothing was found).
    pub fn worst(&self) -> Status {
        self.items
            .iter()
            .map(|f| f.status)
            .fold(Status::Pass, Status::worst)
    }

    /// One per-GPU verdict from that GPU's findings; `ok_text` when it has
    /// none worse than a note.
    pub fn device_result(&self, device: DeviceResult, ok_text: String) -> DeviceResult {
        let mine: Vec<&Finding> = self
            .items
            .iter()
            .filter(|f| f.gpu == Some(device.index))
            .collect();
        let status = mine
            .iter()
            .map(|f| f.status)
            .fold(Status::Pass, Status::worst);
        let (mut texts, notes): (Vec<&str>, Vec<&str>) = {
            let worse = mine
                .iter()
                .filter(|f| f.status >= Status::Warn)
                .map(|f| f.text.as_str());
            let lesser = mine
                .iter()
                .filter(|f| f.status < Status::Warn)
                .map(|f| f.text.as_str());
            (worse.collect(), lesser.collect())
        };
        let summary = if texts.is_empty() {
            if notes.is_empty() {
                ok_text
            } else {
                format!("{ok_text} ({})", notes.join("; "))
            }
        } else {
            texts.extend(notes);
            texts.join("; ")
        };
        DeviceResult {
            status,
            summary,
            ..device
        }
    }

    /// The check's outcome: the worst of the findings and `devices` wins;
    /// `pass_summary` when nothing is worse than skip.
    pub fn conclude(&self, pass_summary: impl Into<String>, devices: Vec<DeviceResult>) -> Outcome {
        let status = devices
            .iter()
            .map(|d| d.status)
            .fold(self.worst(), Status::worst);
        let summary = if status < Status::Warn {
            pass_summary.into()
        } else {
            let worst: Vec<&Finding> = self.items.iter().filter(|f| f.status == status).collect();
            if worst.is_empty() {
                pass_summary.into()
            } else {
                summary_of(&worst)
            }
        };
        let mut outcome = Outcome::new(status, summary).with_hint(self.hints());
        outcome.devices = devices;
        self.set_action(&mut outcome);
        outcome
    }

    /// The action of the worst findings that name one (a fail's before a
    /// warn's), the most drastic among them, with the GPUs (and the first
    /// port) of the findings that name it.
    fn set_action(&self, outcome: &mut Outcome) {
        let Some(worst) = self
            .items
            .iter()
            .filter(|f| f.status >= Status::Warn && f.action.is_some())
            .map(|f| f.status)
            .max()
        else {
            return;
        };
        let named = || {
            self.items
                .iter()
                .filter(|f| f.status == worst && f.action.is_some())
        };
        let Some(action) = named().filter_map(|f| f.action).max() else {
            return;
        };
        let mine: Vec<&Finding> = named().filter(|f| f.action == Some(action)).collect();
        let mut gpus: Vec<u32> = mine.iter().filter_map(|f| f.gpu).collect();
        gpus.sort_unstable();
        gpus.dedup();
        outcome.action = Some(action);
        outcome.action_gpus = gpus;
        outcome.action_port = mine.iter().find_map(|f| f.port.clone());
    }

    /// The hints of every warn-or-worse finding, worst first, each template
    /// once with the list of GPUs it applies to.
    pub fn hints(&self) -> String {
        let mut ordered: Vec<&Finding> = self
            .items
            .iter()
            .filter(|f| f.status >= Status::Warn)
            .collect();
        ordered.sort_by_key(|f| std::cmp::Reverse(f.status));
        let mut templates: Vec<(&str, Vec<u32>)> = Vec::new();
        for f in ordered {
            let Some(t) = f.hint.as_deref() else { continue };
            match templates.iter_mut().find(|(x, _)| *x == t) {
                Some((_, ids)) => ids.extend(f.gpu.filter(|g| !ids.contains(g))),
                None => templates.push((t, f.gpu.into_iter().collect())),
            }
        }
        templates
            .into_iter()
            .map(|(t, ids)| {
                // A machine-wide hint is not a template: it may quote a
                // value from the environment that happens to hold "{gpus}".
                if ids.is_empty() {
                    return t.to_string();
                }
                let list: Vec<String> = ids.iter().map(u32::to_string).collect();
                t.replace("{gpus}", &gpus_phrase(&ids))
                    .replace("{ids}", &list.join(","))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Summary of findings, grouped per GPU in order of appearance ("GPU 3: a,
/// b; GPU 5: c"), at most four groups.
fn summary_of(findings: &[&Finding]) -> String {
    let mut groups: Vec<(Option<u32>, Vec<&str>)> = Vec::new();
    for f in findings {
        match groups
            .iter_mut()
            .find(|(g, _)| f.gpu.is_some() && *g == f.gpu)
        {
            Some((_, texts)) => texts.push(&f.text),
            None => groups.push((f.gpu, vec![&f.text])),
        }
    }
    let mut parts: Vec<String> = groups
        .iter()
        .take(SUMMARY_GROUPS_SHOWN)
        .map(|(gpu, texts)| match gpu {
            Some(g) => format!("GPU {g}: {}", texts.join(", ")),
            None => texts.join(", "),
        })
        .collect();
    if groups.len() > SUMMARY_GROUPS_SHOWN {
        parts.push(format!("and {} more", groups.len() - SUMMARY_GROUPS_SHOWN));
    }
    parts.join("; ")
}

impl Metric {
    /// A named number with its unit.
    pub fn new(name: &str, value: f64, unit: &str) -> Self {
        Metric {
            name: name.to_string(),
            value,
            unit: unit.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(index: u32) -> DeviceResult {
        DeviceResult {
            index,
            label: None,
            name: "GPU".into(),
            uuid: None,
            status: Status::Pass,
            summary: String::new(),
            metrics: vec![],
        }
    }

    #[test]
    fn worst_wins_and_hints_merge_per_template() {
        let mut f = Findings::new();
        f.push(Finding::new(Some(1), Status::Warn, "x8").hint("reseat {gpus}"));
        f.push(Finding::new(Some(5), Status::Warn, "x8").hint("reseat {gpus}"));
        f.push(Finding::new(Some(3), Status::Fail, "ECC").hint("drain; reset {ids}"));
        let o = f.conclude("all fine", vec![]);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 3: ECC");
        assert_eq!(o.hint.as_deref(), Some("drain; reset 3; reseat GPUs 1, 5"));
    }

    #[test]
    fn the_worst_findings_most_drastic_action_wins_with_its_gpus() {
        let mut f = Findings::new();
        f.push(Finding::new(Some(1), Status::Warn, "x8").action(Action::ServiceHardware));
        f.push(Finding::new(Some(5), Status::Warn, "x8").action(Action::ServiceHardware));
        f.push(Finding::new(Some(4), Status::Warn, "x8").action(Action::FixConfig));
        f.push(Finding::new(Some(6), Status::Pass, "note").action(Action::ContactProvider));
        let o = f.conclude("", vec![]);
        assert_eq!(o.action, Some(Action::ServiceHardware));
        assert_eq!(o.action_gpus, vec![1, 5]);
        // A fail's action comes before a warn's, however drastic.
        f.push(Finding::new(Some(3), Status::Fail, "remap").action(Action::ResetGpu));
        let o = f.conclude("", vec![]);
        assert_eq!((o.action, o.action_gpus), (Some(Action::ResetGpu), vec![3]));
    }

    #[test]
    fn a_finding_without_an_action_leaves_the_check_default() {
        let mut f = Findings::new();
        f.push(Finding::new(Some(2), Status::Fail, "remap pending"));
        let mut o = f.conclude("", vec![device_failed(2)]);
        assert_eq!(o.action, None);
        o.resolve_action("gpu.ecc");
        assert_eq!(
            (o.action, o.action_gpus.as_slice()),
            (Some(Action::ResetGpu), &[2][..])
        );
        let mut pass = Findings::new().conclude("fine", vec![]);
        pass.resolve_action("gpu.ecc");
        assert_eq!(pass.action, None);
    }

    fn device_failed(index: u32) -> DeviceResult {
        DeviceResult {
            status: Status::Fail,
            ..device(index)
        }
    }

    #[test]
    fn nothing_found_passes_with_the_pass_summary() {
        let f = Findings::new();
        let o = f.conclude("8 GPUs healthy", vec![]);
        assert_eq!(
            (o.status, o.summary.as_str(), o.hint),
            (Status::Pass, "8 GPUs healthy", None)
        );
    }

    #[test]
    fn device_rows_carry_notes_and_their_own_verdict() {
        let mut f = Findings::new();
        f.push(Finding::new(Some(0), Status::Pass, "Xorg present"));
        f.push(Finding::new(Some(2), Status::Warn, "hot"));
        let d0 = f.device_result(device(0), "ok".into());
        let d2 = f.device_result(device(2), "ok".into());
        assert_eq!(
            (d0.status, d0.summary.as_str()),
            (Status::Pass, "ok (Xorg present)")
        );
        assert_eq!((d2.status, d2.summary.as_str()), (Status::Warn, "hot"));
        let o = f.conclude("fine", vec![d0, d2]);
        assert_eq!(o.status, Status::Warn);
    }

    #[test]
    fn a_machine_wide_hint_is_taken_as_written() {
        let mut f = Findings::new();
        f.add(
            Status::Fail,
            "bad entry",
            Some("fix or remove \"{gpus}\"".into()),
        );
        let o = f.conclude("", vec![]);
        assert_eq!(o.hint.as_deref(), Some("fix or remove \"{gpus}\""));
    }

    #[test]
    fn summary_caps_groups() {
        let mut f = Findings::new();
        for g in 0..6 {
            f.push(Finding::new(Some(g), Status::Warn, "slow"));
        }
        let o = f.conclude("", vec![]);
        assert!(o.summary.ends_with("; and 2 more"), "{}", o.summary);
    }
}
