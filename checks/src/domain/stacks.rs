//! A running job's Python stacks, as `faulthandler` (the worker server's
//! `dump_traceback`) and py-spy (`dump --json`) print them, and what they
//! say: where each rank's main thread is (a collective, a sleep, the data
//! loader, elsewhere in the user's code), and which ranks the others wait
//! for. Pure: the texts come from `probe::stacks`, the verdicts go to the
//! job checks.

use serde::{Deserialize, Serialize};

/// One Python frame.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub function: String,
    pub file: String,
    pub line: u32,
    /// The frame's source line, where the prober could read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Why the source line was not read: the rank's own user may not read
    /// the file its frame names (gpucheck reads a rank's files with that
    /// user's rights only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_read: Option<String>,
}

impl Frame {
    /// "train.py:41 in step" (the file's last two path parts).
    pub fn at(&self) -> String {
        let short: Vec<&str> = self.file.rsplit('/').take(2).collect();
        let file = short.into_iter().rev().collect::<Vec<_>>().join("/");
        format!("{file}:{} in {}", self.line, self.function)
    }

    /// [`Frame::at`] with the source line: "train.py:41 in step
    /// (`time.sleep(600)`)".
    pub fn shown(&self) -> String {
        match self
            .code
            .as_deref()
            .map(str::trim)
            .filter(|c| !c.is_empty())
        {
            Some(code) => format!("{} (`{}`)", self.at(), crate::domain::text::cut(code, 80)),
            None => match &self.not_read {
                Some(why) => format!(
                    "{} (not read: {})",
                    self.at(),
                    crate::domain::text::cut(why, 160)
                ),
                None => self.at(),
            },
        }
    }

    /// A frame of the Python installation or a library rather than of the
    /// user's own code.
    pub fn is_library(&self) -> bool {
        let f = &self.file;
        f.contains("/site-packages/")
            || f.contains("/dist-packages/")
            || f.contains("/lib/python3")
            || f.starts_with('<')
    }
}

/// One thread's frames, innermost first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    pub name: String,
    pub frames: Vec<Frame>,
}

/// A faulthandler traceback ("Thread 0x... (most recent call first):" then
/// `  File "f.py", line 7 in fn` lines), one thread per block.
pub fn from_faulthandler(text: &str) -> Vec<Thread> {
    let mut threads = Vec::new();
    let mut current: Option<Thread> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(head) = t
            .strip_prefix("Current thread ")
            .or_else(|| t.strip_prefix("Thread "))
        {
            threads.extend(current.take());
            let name = head.split_whitespace().next().unwrap_or("").to_string();
            current = Some(Thread {
                name,
                frames: Vec::new(),
            });
        } else if let (Some(th), Some(frame)) = (current.as_mut(), faulthandler_frame(t)) {
            th.frames.push(frame);
        }
    }
    threads.extend(current);
    threads.retain(|t| !t.frames.is_empty());
    threads
}

/// `File "/x/train.py", line 7 in step`.
fn faulthandler_frame(line: &str) -> Option<Frame> {
    let rest = line.strip_prefix("File \"")?;
    let (file, rest) = rest.split_once("\", line ")?;
    let (number, function) = rest.split_once(" in ").unwrap_or((rest, "?"));
    Some(Frame {
        function: function.trim().to_string(),
        file: file.to_string(),
        line: number.trim().parse().ok()?,
        code: None,
        not_read: None,
    })
}

#[derive(Deserialize)]
struct SpyThread {
    #[serde(default)]
    thread_name: Option<String>,
    #[serde(default)]
    frames: Vec<SpyFrame>,
}

#[derive(Deserialize)]
struct SpyFrame {
    name: String,
    filename: String,
    #[serde(default)]
    line: i64,
}

/// py-spy's `dump --json`: an array of threads with their frames.
pub fn from_pyspy(json: &str) -> Result<Vec<Thread>, String> {
    let threads: Vec<SpyThread> =
        serde_json::from_str(json).map_err(|e| format!("py-spy printed no stack: {e}"))?;
    Ok(threads
        .into_iter()
        .filter(|t| !t.frames.is_empty())
        .map(|t| Thread {
            name: t.thread_name.unwrap_or_default(),
            frames: t
                .frames
                .into_iter()
                .map(|f| Frame {
                    function: f.name,
                    file: f.filename,
                    line: u32::try_from(f.line).unwrap_or(0),
                    code: None,
                    not_read: None,
                })
                .collect(),
        })
        .collect())
}

/// The thread that runs the training loop: py-spy's `MainThread`, else the
/// one whose outermost frame is the script's `<module>`, else the deepest.
pub fn main_thread(threads: &[Thread]) -> Option<&Thread> {
    threads
        .iter()
        .find(|t| t.name == "MainThread")
        .or_else(|| {
            threads
                .iter()
                .find(|t| t.frames.last().is_some_and(|f| f.function == "<module>"))
        })
        .or_else(|| threads.iter().max_by_key(|t| t.frames.len()))
}

/// What a rank's main thread is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "op")]
pub enum Activity {
    /// In a torch.distributed call ("all_reduce", "barrier") or a work
    /// handle's `wait()`.
    Collective(String),
    /// In backward: under DDP, where gradients are all-reduced.
    Backward,
    /// Asleep (`time.sleep`).
    Sleep,
    /// Fetching a batch (torch.utils.data).
    DataLoading,
    /// Anywhere else.
    Elsewhere,
}

impl Activity {
    /// Waiting on the other ranks (or able to be).
    pub fn waits_on_peers(&self) -> bool {
        matches!(self, Activity::Collective(_) | Activity::Backward)
    }

    pub fn words(&self) -> String {
        match self {
            Activity::Collective(op) => format!("in {op}"),
            Activity::Backward => "in backward (DDP's gradient all-reduce)".to_string(),
            Activity::Sleep => "asleep in time.sleep".to_string(),
            Activity::DataLoading => "loading data (torch.utils.data)".to_string(),
            Activity::Elsewhere => "in its own code, not in a collective".to_string(),
        }
    }
}

/// Where a rank is: what it does and the user's own frame that does it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Where {
    pub activity: Activity,
    /// The innermost frame of the user's own code (else the innermost).
    pub frame: Option<Frame>,
}

/// What a thread is doing, from its frames (innermost first).
pub fn classify(thread: &Thread) -> Where {
    let frames = &thread.frames;
    let user = frames
        .iter()
        .find(|f| !f.is_library())
        .or(frames.first())
        .cloned();
    let calls = |f: &Frame, what: &str| f.code.as_deref().is_some_and(|c| c.contains(what));
    let activity = if let Some(f) = frames
        .iter()
        .find(|f| f.file.ends_with("torch/distributed/distributed_c10d.py"))
    {
        Activity::Collective(collective_name(frames, f))
    } else if frames.iter().any(|f| f.file.contains("torch/utils/data/")) {
        Activity::DataLoading
    } else if frames.iter().any(|f| f.file.contains("torch/autograd/")) {
        Activity::Backward
    } else if frames.first().is_some_and(|f| f.function == "sleep")
        || user.as_ref().is_some_and(|f| calls(f, "sleep("))
    {
        Activity::Sleep
    } else if user.as_ref().is_some_and(|f| calls(f, ".wait(")) {
        Activity::Collective("wait".to_string())
    } else {
        Activity::Elsewhere
    };
    Where {
        activity,
        frame: user,
    }
}

/// The public torch.distributed call a frame of distributed_c10d.py is in:
/// the outermost frame of that file (helpers such as `_check_single_tensor`
/// sit inside the call the user made).
fn collective_name(frames: &[Frame], inner: &Frame) -> String {
    frames
        .iter()
        .rev()
        .find(|f| f.file == inner.file)
        .map_or(&inner.function, |f| &f.function)
        .clone()
}

/// The ranks a stuck job waits for, by their stacks.
#[derive(Debug, Clone, PartialEq)]
pub struct StackVerdict {
    /// Ranks named, with where they are.
    pub blamed: Vec<(u32, Where)>,
    /// The ranks waiting on the others.
    pub waiting: Vec<u32>,
    /// True when the blamed are a minority waiting in a collective the rest
    /// never entered (rather than ranks missing from one).
    pub ahead: bool,
}

/// Who the others wait for, from where each rank was at each of several
/// moments. A rank is named only when it was at the same place, outside a
/// collective, at every moment while the others waited (or the reverse,
/// when the ranks outside outnumber those inside): a rank that merely
/// passed through its own code between two collectives is never named.
pub fn judge(samples: &[Vec<(u32, Where)>]) -> Option<StackVerdict> {
    let first = samples.first()?;
    let verdicts: Vec<StackVerdict> = samples
        .iter()
        .map(|s| judge_one(s))
        .collect::<Option<_>>()?;
    let same = |v: &StackVerdict| {
        v.ahead == verdicts[0].ahead
            && v.blamed.len() == verdicts[0].blamed.len()
            && v.blamed
                .iter()
                .zip(&verdicts[0].blamed)
                .all(|(a, b)| a == b)
    };
    if !verdicts.iter().all(same) || first.is_empty() {
        return None;
    }
    verdicts.into_iter().next_back()
}

fn judge_one(sample: &[(u32, Where)]) -> Option<StackVerdict> {
    type Side<'a> = Vec<&'a (u32, Where)>;
    let (waiting, others): (Side, Side) = sample
        .iter()
        .partition(|(_, w)| w.activity.waits_on_peers());
    if waiting.is_empty() || others.is_empty() {
        return None;
    }
    let ahead = others.len() > waiting.len();
    let (blamed, rest) = if ahead {
        (waiting, others)
    } else {
        (others, waiting)
    };
    Some(StackVerdict {
        blamed: blamed.into_iter().cloned().collect(),
        waiting: rest.into_iter().map(|(r, _)| *r).collect(),
        ahead,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAULTHANDLER: &str = "Current thread 0x00007fbef0a286c0 (most recent call first):
  <no Python frame>

Thread 0x00007fedc23c7b80 (most recent call first):
  File \"/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py\", line 4181 in all_reduce
  File \"/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py\", line 83 in wrapper
  File \"/tmp/lj/train.py\", line 8 in <module>
";

    fn frame(function: &str, file: &str, line: u32, code: Option<&str>) -> Frame {
        Frame {
            function: function.into(),
            file: file.into(),
            line,
            code: code.map(str::to_string),
            not_read: None,
        }
    }

    fn at(activity: Activity, line: u32) -> Where {
        Where {
            activity,
            frame: Some(frame("<module>", "/job/train.py", line, None)),
        }
    }

    #[test]
    fn faulthandler_text_gives_the_main_thread_in_all_reduce() {
        let threads = from_faulthandler(FAULTHANDLER);
        assert_eq!(threads.len(), 1, "the frameless server thread is dropped");
        let main = main_thread(&threads).unwrap();
        let w = classify(main);
        assert_eq!(w.activity, Activity::Collective("all_reduce".into()));
        assert_eq!(w.frame.unwrap().at(), "lj/train.py:8 in <module>");
    }

    #[test]
    fn pyspy_json_is_read_and_main_thread_found() {
        let json = r#"[{"thread_name":"Thread-1","frames":[{"name":"run","filename":"/usr/lib/python3.11/threading.py","line":9}]},
            {"thread_name":"MainThread","frames":[{"name":"<module>","filename":"/job/train.py","line":7}]}]"#;
        let threads = from_pyspy(json).unwrap();
        assert_eq!(main_thread(&threads).unwrap().frames[0].line, 7);
        assert!(from_pyspy("Error: Permission denied").is_err());
    }

    #[test]
    fn a_line_not_read_for_the_rank_user_says_why_and_holds_nothing() {
        let mut f = frame("<module>", "/tmp/x/secret.py", 2, None);
        f.not_read = Some("/tmp/x/secret.py is not readable by the rank's user (uid 1000)".into());
        assert_eq!(
            f.shown(),
            "x/secret.py:2 in <module> (not read: /tmp/x/secret.py is not readable by the \
             rank's user (uid 1000))"
        );
        let t = Thread {
            name: "MainThread".into(),
            frames: vec![f],
        };
        // A file name is never taken for the code: no sleep, no collective.
        assert_eq!(classify(&t).activity, Activity::Elsewhere);
    }

    #[test]
    fn sleep_is_read_from_the_source_line() {
        let t = Thread {
            name: "MainThread".into(),
            frames: vec![frame(
                "<module>",
                "/job/train.py",
                7,
                Some("    time.sleep(600)"),
            )],
        };
        assert_eq!(classify(&t).activity, Activity::Sleep);
        assert_eq!(
            classify(&t).frame.unwrap().shown(),
            "job/train.py:7 in <module> (`time.sleep(600)`)"
        );
    }

    #[test]
    fn data_loader_and_backward_and_wait() {
        let lib = "/v/lib/python3.11/site-packages/torch";
        let dl = Thread {
            name: String::new(),
            frames: vec![
                frame("__getitem__", "/job/data.py", 12, None),
                frame(
                    "fetch",
                    &format!("{lib}/utils/data/_utils/fetch.py"),
                    52,
                    None,
                ),
                frame("<module>", "/job/train.py", 30, None),
            ],
        };
        let w = classify(&dl);
        assert_eq!(w.activity, Activity::DataLoading);
        assert_eq!(w.frame.unwrap().function, "__getitem__");
        let bw = Thread {
            name: String::new(),
            frames: vec![
                frame(
                    "_engine_run_backward",
                    &format!("{lib}/autograd/graph.py"),
                    829,
                    None,
                ),
                frame("<module>", "/job/train.py", 31, None),
            ],
        };
        assert_eq!(classify(&bw).activity, Activity::Backward);
        let wait = Thread {
            name: String::new(),
            frames: vec![frame("<module>", "/job/train.py", 9, Some("work.wait()"))],
        };
        assert_eq!(
            classify(&wait).activity,
            Activity::Collective("wait".into())
        );
    }

    #[test]
    fn the_public_call_is_named_not_its_helper() {
        let c10d = "/v/site-packages/torch/distributed/distributed_c10d.py";
        let t = Thread {
            name: String::new(),
            frames: vec![
                frame("_check_single_tensor", c10d, 10, None),
                frame("broadcast", c10d, 20, None),
                frame("<module>", "/job/train.py", 5, None),
            ],
        };
        assert_eq!(
            classify(&t).activity,
            Activity::Collective("broadcast".into())
        );
    }

    #[test]
    fn a_rank_outside_the_collective_at_every_moment_is_named() {
        let ar = || Activity::Collective("all_reduce".into());
        let sample = vec![
            (0, at(ar(), 8)),
            (1, at(ar(), 8)),
            (2, at(Activity::Sleep, 7)),
        ];
        let v = judge(&[sample.clone(), sample]).unwrap();
        assert_eq!(v.blamed.len(), 1);
        assert_eq!(v.blamed[0].0, 2);
        assert_eq!(v.waiting, vec![0, 1]);
        assert!(!v.ahead);
    }

    #[test]
    fn a_rank_passing_through_its_own_code_is_not_named() {
        let ar = || Activity::Collective("all_reduce".into());
        let one = vec![(0, at(ar(), 8)), (1, at(Activity::Elsewhere, 6))];
        let two = vec![(0, at(Activity::Elsewhere, 6)), (1, at(ar(), 8))];
        assert_eq!(judge(&[one.clone(), two]), None);
        let moved = vec![(0, at(ar(), 8)), (1, at(Activity::Elsewhere, 9))];
        assert_eq!(judge(&[one, moved]), None, "rank 1 moved: it is running");
    }

    #[test]
    fn all_in_a_collective_or_all_outside_names_nobody() {
        let ar = || Activity::Collective("all_reduce".into());
        assert_eq!(judge(&[vec![(0, at(ar(), 8)), (1, at(ar(), 8))]]), None);
        let outside = vec![(0, at(Activity::Elsewhere, 3)), (1, at(Activity::Sleep, 4))];
        assert_eq!(judge(&[outside]), None);
        assert_eq!(judge(&[]), None);
    }

    #[test]
    fn a_minority_in_a_collective_the_rest_never_entered_is_named() {
        let sample = vec![
            (0, at(Activity::Collective("barrier".into()), 12)),
            (1, at(Activity::Elsewhere, 20)),
            (2, at(Activity::Elsewhere, 20)),
        ];
        let v = judge(&[sample]).unwrap();
        assert!(v.ahead);
        assert_eq!(v.blamed[0].0, 0);
        assert_eq!(v.waiting, vec![1, 2]);
    }
}
