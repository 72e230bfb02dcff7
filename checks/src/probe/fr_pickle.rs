//! A decoder of just the pickle that PyTorch's Flight Recorder writes, into
//! plain values ([`PVal`]): dicts, lists, tuples (as lists), strings,
//! integers, floats, booleans and None. A dump is a file from elsewhere, so nothing
//! in it is ever executed: every opcode that would import or call code
//! (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, EXT*, PERSID)
//! is refused by name, and so is any opcode the recorder does not write.
//!
//! Bounded everywhere: the machine is iterative (no recursion on the
//! input), values nest at most [`MAX_DEPTH`] deep, and every value made,
//! including the copies a memo reference makes, counts against a budget
//! proportional to the input, so a memo bomb ends in an error rather than
//! in gigabytes.
//!
//! Cheap on a dump's two million entries: strings are borrowed from the
//! input (copied only where they are not UTF-8); the value of a key the
//! caller names as unread (a stack's `frames`) is walked, bounded and
//! counted like any other, but none of its containers is built: it is
//! [`PVal::Skipped`]; and the dicts of the list under the key a [`Fold`]
//! names (a dump's `entries`) are never built either: each pair goes to
//! the caller as it is set, and the dict is [`PVal::Folded`].

use std::borrow::Cow;

/// A decoded value, its strings borrowed from the input where they can
/// be; dicts keep their pairs in order, read in one pass.
#[derive(Debug, Clone, PartialEq)]
pub enum PVal<'a> {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
    List(Vec<PVal<'a>>),
    Dict(Vec<(Cow<'a, str>, PVal<'a>)>),
    /// A container under a key the caller left unread: walked, not built.
    Skipped,
    /// A dict the caller's [`Fold`] took pair by pair, by its number.
    Folded(usize),
}

/// Dicts the caller builds as their pairs are set, instead of as values:
/// the dict items of the list under one key (a dump's `entries`, each
/// folded straight into the caller's own record).
pub trait Fold<'a> {
    /// The key of the list whose dict items are folded.
    fn key(&self) -> &str;
    /// A new dict: its number, or why no more are taken (each costs the
    /// caller more than a value, so the caller bounds how many).
    fn open(&mut self) -> Result<usize, String>;
    /// One pair set in dict `n`.
    fn pair(&mut self, n: usize, key: &str, value: PVal<'a>) -> Result<(), String>;
}

impl PVal<'_> {
    /// A JSON document as the same values (serde_json has bounded its
    /// nesting to 128).
    pub fn from_json(v: serde_json::Value) -> PVal<'static> {
        use serde_json::Value;
        match v {
            Value::Null => PVal::None,
            Value::Bool(b) => PVal::Bool(b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => PVal::Int(i),
                None => PVal::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => PVal::Str(s.into()),
            Value::Array(a) => PVal::List(a.into_iter().map(PVal::from_json).collect()),
            Value::Object(m) => PVal::Dict(
                m.into_iter()
                    .map(|(k, v)| (Cow::Owned(k), PVal::from_json(v)))
                    .collect(),
            ),
        }
    }
}

/// Deepest nesting of containers accepted (a dump nests five deep).
pub const MAX_DEPTH: usize = 32;
/// Values made per input byte at most, memo copies included (a real dump
/// makes a quarter of one per byte; a value takes up to 56 bytes).
const VALUES_PER_BYTE: usize = 4;
/// Values made at most whatever the input's size (about 3 GiB of values).
const MAX_VALUES: usize = 64_000_000;

/// A value on the machine's stack with its nesting depth and how many
/// values it holds (itself included), so that a memo copy is charged.
#[derive(Clone)]
struct Item<'a> {
    value: PVal<'a>,
    depth: usize,
    count: usize,
}

enum Slot<'a> {
    Mark,
    Item(Item<'a>),
}

struct Machine<'a, 's, 'f> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Slot<'a>>,
    /// By memo key: pickles number their memo entries from 0 up, so a key
    /// is one already stored or the next one.
    memo: Vec<Item<'a>>,
    made: usize,
    budget: usize,
    /// Keys whose values are left unread.
    skip: &'s [&'s str],
    fold: Option<&'f mut dyn Fold<'a>>,
}

/// Decode one pickle, leaving the values of the keys in `skip` unread.
pub fn decode<'a>(data: &'a [u8], skip: &[&str]) -> Result<PVal<'a>, String> {
    decode_folding(data, skip, None)
}

/// [`decode`], with the dicts `fold` names handed to it as they are set.
pub fn decode_folding<'a>(
    data: &'a [u8],
    skip: &[&str],
    fold: Option<&mut dyn Fold<'a>>,
) -> Result<PVal<'a>, String> {
    let mut m = Machine {
        data,
        pos: 0,
        stack: Vec::with_capacity(64),
        memo: Vec::new(),
        made: 0,
        budget: data
            .len()
            .saturating_mul(VALUES_PER_BYTE)
            .clamp(1024, MAX_VALUES),
        skip,
        fold,
    };
    loop {
        let at = m.pos;
        let op = m.byte()?;
        if op == b'.' {
            return match m.stack.pop() {
                Some(Slot::Item(i)) => Ok(i.value),
                _ => Err(format!("pickle: STOP with nothing to return at byte {at}")),
            };
        }
        m.step(op)
            .map_err(|e| format!("pickle: {e} at byte {at}"))?;
    }
}

impl<'a> Machine<'a, '_, '_> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.data.len());
        let Some(end) = end else {
            return Err("truncated".to_string());
        };
        let data: &'a [u8] = self.data;
        let s = &data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn uint(&mut self, n: usize) -> Result<u64, String> {
        let b = self.take(n)?;
        Ok(b.iter()
            .rev()
            .fold(0u64, |acc, x| (acc << 8) | u64::from(*x)))
    }

    fn push(&mut self, value: PVal<'a>) -> Result<(), String> {
        self.push_item(Item {
            value,
            depth: 0,
            count: 1,
        })
    }

    /// Refuse to make `count` more values beyond the budget: called before
    /// a copy is made, so no copy outgrows it.
    fn afford(&self, count: usize) -> Result<(), String> {
        if self.made.saturating_add(count) > self.budget {
            return Err(format!(
                "more than {} values from {} bytes (a memo bomb?)",
                self.budget,
                self.data.len()
            ));
        }
        Ok(())
    }

    fn push_item(&mut self, item: Item<'a>) -> Result<(), String> {
        self.afford(item.count)?;
        self.made += item.count;
        if item.depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH}"));
        }
        self.stack.push(Slot::Item(item));
        Ok(())
    }

    fn pop(&mut self) -> Result<Item<'a>, String> {
        let popped = self.stack.pop();
        match popped {
            Some(Slot::Item(i)) => Ok(i),
            Some(Slot::Mark) => Err("a mark where a value was expected".to_string()),
            None => Err("stack underflow".to_string()),
        }
    }

    /// Where the topmost mark is.
    fn mark(&self) -> Result<usize, String> {
        self.stack
            .iter()
            .rposition(|s| matches!(s, Slot::Mark))
            .ok_or_else(|| "no mark".to_string())
    }

    /// Everything above the topmost mark, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Item<'a>>, String> {
        let at = self.mark()?;
        let items = self.stack.split_off(at + 1);
        self.stack.pop();
        Ok(items
            .into_iter()
            .filter_map(|s| match s {
                Slot::Item(i) => Some(i),
                Slot::Mark => None,
            })
            .collect())
    }

    /// The values on the stack, nearest the top first, marks passed over.
    fn nearest(&self) -> impl Iterator<Item = &PVal<'a>> {
        self.stack.iter().rev().filter_map(|s| match s {
            Slot::Item(i) => Some(&i.value),
            Slot::Mark => None,
        })
    }

    /// A new container is skipped as the value of a key left unread (the
    /// key is then the nearest value below it), or as an item of a skipped
    /// container (which is then the nearest value below it, or the item
    /// added before it). Pickles build a container's items above it and
    /// then add them, so a container made after a skipped one is done (the
    /// next key of an entry) has a value of its own nearest.
    fn skipping(&self) -> bool {
        match self.nearest().next() {
            Some(PVal::Skipped) => true,
            Some(PVal::Str(k)) => self.skip.contains(&&**k),
            _ => false,
        }
    }

    /// A new dict is folded as an item of the list under the fold's key:
    /// the nearest value is that list (the key below it) or the item
    /// folded before it.
    fn folding(&self) -> bool {
        let Some(fold) = &self.fold else {
            return false;
        };
        let mut values = self.nearest();
        match (values.next(), values.next()) {
            (Some(PVal::Folded(_)), _) => true,
            (Some(PVal::List(_)), Some(PVal::Str(k))) => k == fold.key(),
            _ => false,
        }
    }

    fn string(&mut self, n: u64) -> Result<(), String> {
        let n = usize::try_from(n).map_err(|_| "string too long")?;
        let s = String::from_utf8_lossy(self.take(n)?);
        self.push(PVal::Str(s))
    }

    fn step(&mut self, op: u8) -> Result<(), String> {
        match op {
            0x80 => self.take(1).map(drop), // PROTO
            0x95 => self.take(8).map(drop), // FRAME
            b'(' => {
                self.stack.push(Slot::Mark);
                Ok(())
            }
            b'N' => self.push(PVal::None),
            0x88 => self.push(PVal::Bool(true)),
            0x89 => self.push(PVal::Bool(false)),
            b'K' => {
                let v = self.uint(1)?;
                self.push(PVal::Int(v as i64))
            }
            b'M' => {
                let v = self.uint(2)?;
                self.push(PVal::Int(v as i64))
            }
            b'J' => {
                let v = self.uint(4)? as u32 as i32;
                self.push(PVal::Int(i64::from(v)))
            }
            0x8a => self.long1(),
            b'G' => {
                let v = f64::from_bits(u64::from_be_bytes(
                    self.take(8)?.try_into().map_err(|_| "truncated")?,
                ));
                self.push(PVal::Float(v))
            }
            b'X' | b'T' | b'B' => {
                let n = self.uint(4)?;
                self.string(n)
            }
            0x8c | b'U' | b'C' => {
                let n = self.uint(1)?;
                self.string(n)
            }
            0x8d | 0x8e => {
                let n = self.uint(8)?;
                self.string(n)
            }
            _ => self.container(op),
        }
    }

    fn long1(&mut self) -> Result<(), String> {
        let n = usize::from(self.byte()?);
        let bytes = self.take(n)?;
        if n > 8 {
            return Err(format!("an integer of {n} bytes"));
        }
        let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
        let mut raw = [if negative { 0xff } else { 0 }; 8];
        raw[..n].copy_from_slice(bytes);
        let v = i64::from_le_bytes(raw);
        // Nine-byte encodings of large unsigned values do not occur: n <= 8.
        self.push(PVal::Int(v))
    }

    /// An empty container, [`PVal::Skipped`] where it is left unread, or
    /// [`PVal::Folded`] where the caller folds it.
    fn empty(&mut self, dict: bool) -> Result<PVal<'a>, String> {
        if self.skipping() {
            return Ok(PVal::Skipped);
        }
        if !dict {
            return Ok(PVal::List(Vec::new()));
        }
        if self.folding() {
            if let Some(fold) = self.fold.as_mut() {
                return fold.open().map(PVal::Folded);
            }
        }
        Ok(PVal::Dict(Vec::new()))
    }

    fn container(&mut self, op: u8) -> Result<(), String> {
        match op {
            b'}' => {
                let v = self.empty(true)?;
                self.push(v)
            }
            b']' | b')' => {
                let v = self.empty(false)?;
                self.push(v)
            }
            b'l' | b't' => {
                let items = self.pop_mark()?;
                self.push_list(items)
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                let at = self.stack.len().checked_sub(n).ok_or("stack underflow")?;
                let mut items = Vec::with_capacity(n);
                for s in self.stack.split_off(at) {
                    match s {
                        Slot::Item(i) => items.push(i),
                        Slot::Mark => return Err("a mark inside a tuple".to_string()),
                    }
                }
                self.push_list(items)
            }
            b'a' => {
                let item = self.pop()?;
                self.extend_list(vec![item])
            }
            b'e' => {
                let at = self.mark()?;
                self.append_above(at)
            }
            b'd' => {
                let items = self.pop_mark()?;
                let v = self.empty(true)?;
                self.push(v)?;
                self.extend_dict(items)
            }
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                self.extend_dict(vec![k, v])
            }
            b'u' => {
                let at = self.mark()?;
                self.set_above(at)
            }
            _ => self.memo_or_refuse(op),
        }
    }

    fn push_list(&mut self, items: Vec<Item<'a>>) -> Result<(), String> {
        let depth = items.iter().map(|i| i.depth + 1).max().unwrap_or(0);
        let count = items.iter().map(|i| i.count).sum::<usize>() + 1;
        let value = match self.skipping() {
            true => PVal::Skipped,
            false => PVal::List(items.into_iter().map(|i| i.value).collect()),
        };
        // The items were charged when they were pushed.
        self.made = self.made.saturating_sub(count - 1);
        self.push_item(Item {
            value,
            depth,
            count,
        })
    }

    /// APPENDS: the items above the mark at `at` go into the list below
    /// it, moved, with no list of them in between.
    fn append_above(&mut self, at: usize) -> Result<(), String> {
        let (below, above) = self.stack.split_at_mut(at);
        let Some(Slot::Item(top)) = below.last_mut() else {
            return Err("no container to add to".to_string());
        };
        if let PVal::List(list) = &mut top.value {
            list.reserve(above.len() - 1);
        }
        for slot in &mut above[1..] {
            if let Slot::Item(i) = std::mem::replace(slot, Slot::Mark) {
                add_to_list(top, i)?;
            }
        }
        self.stack.truncate(at);
        Ok(())
    }

    /// SETITEMS: the pairs above the mark at `at` go into the dict below
    /// it, moved.
    fn set_above(&mut self, at: usize) -> Result<(), String> {
        if (self.stack.len() - at - 1) % 2 != 0 {
            return Err("a dict key without its value".to_string());
        }
        let (below, above) = self.stack.split_at_mut(at);
        let Some(Slot::Item(top)) = below.last_mut() else {
            return Err("no container to add to".to_string());
        };
        let mut fold = self.fold.as_deref_mut();
        if let PVal::Dict(map) = &mut top.value {
            map.reserve(above.len() / 2);
        }
        for pair in above[1..].chunks_exact_mut(2) {
            let [k, v] = pair else { continue };
            let taken = (
                std::mem::replace(k, Slot::Mark),
                std::mem::replace(v, Slot::Mark),
            );
            let (Slot::Item(k), Slot::Item(v)) = taken else {
                return Err("a mark inside a dict's items".to_string());
            };
            add_to_dict(top, k, v, fold.as_deref_mut())?;
        }
        self.stack.truncate(at);
        Ok(())
    }

    fn top(&mut self) -> Result<&mut Item<'a>, String> {
        match self.stack.last_mut() {
            Some(Slot::Item(i)) => Ok(i),
            _ => Err("no container to add to".to_string()),
        }
    }

    fn extend_list(&mut self, items: Vec<Item<'a>>) -> Result<(), String> {
        let top = self.top()?;
        items.into_iter().try_for_each(|i| add_to_list(top, i))
    }

    fn extend_dict(&mut self, items: Vec<Item<'a>>) -> Result<(), String> {
        if items.len() % 2 != 0 {
            return Err("a dict key without its value".to_string());
        }
        let Some(Slot::Item(top)) = self.stack.last_mut() else {
            return Err("no container to add to".to_string());
        };
        let mut fold = self.fold.as_deref_mut();
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            add_to_dict(top, k, v, fold.as_deref_mut())?;
        }
        Ok(())
    }

    fn memo_or_refuse(&mut self, op: u8) -> Result<(), String> {
        match op {
            b'q' | b'r' | 0x94 => {
                let key = match op {
                    b'q' => self.uint(1)? as usize,
                    b'r' => self.uint(4)? as usize,
                    _ => self.memo.len(),
                };
                // The copy is charged before it is made.
                let count = self.top()?.count;
                self.afford(count)?;
                self.made += count;
                let top = self.top()?.clone();
                if key == self.memo.len() {
                    self.memo.push(top);
                } else {
                    let next = self.memo.len();
                    *self
                        .memo
                        .get_mut(key)
                        .ok_or(format!("memo key {key} skips the next one, {next}"))? = top;
                }
                Ok(())
            }
            b'h' | b'j' => {
                let key = if op == b'h' {
                    self.uint(1)? as u32
                } else {
                    self.uint(4)? as u32
                };
                let count = self
                    .memo
                    .get(key as usize)
                    .ok_or("a memo entry never stored")?
                    .count;
                // Charged before it is copied.
                self.afford(count)?;
                let item = self.memo.get(key as usize).cloned().ok_or("no memo")?;
                self.push_item(item)
            }
            b'0' => {
                let popped = self.stack.pop();
                popped.map(drop).ok_or_else(|| "stack underflow".into())
            }
            b'1' => self.pop_mark().map(drop),
            b'2' => {
                let count = self.top()?.count;
                self.afford(count)?;
                let top = self.top()?.clone();
                self.push_item(top)
            }
            _ => Err(refused(op)),
        }
    }
}

/// One item into the list `top`, charged to it; dropped where `top` is
/// skipped.
fn add_to_list<'a>(top: &mut Item<'a>, i: Item<'a>) -> Result<(), String> {
    top.depth = top.depth.max(i.depth + 1);
    top.count += i.count;
    if top.depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH}"));
    }
    match &mut top.value {
        PVal::List(list) => list.push(i.value),
        PVal::Skipped => {}
        _ => return Err("APPEND to something that is not a list".to_string()),
    }
    Ok(())
}

/// One pair into the dict `top`, charged to it; dropped where `top` is
/// skipped, handed to `fold` where it is folded.
fn add_to_dict<'a>(
    top: &mut Item<'a>,
    k: Item<'a>,
    v: Item<'a>,
    fold: Option<&mut (dyn Fold<'a> + '_)>,
) -> Result<(), String> {
    top.depth = top.depth.max(v.depth + 1);
    top.count += v.count;
    if top.depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH}"));
    }
    if matches!(top.value, PVal::Skipped) {
        return Ok(());
    }
    let key = match k.value {
        PVal::Str(s) => s,
        PVal::Int(n) => Cow::Owned(n.to_string()),
        _ => return Err("a dict key that is not a string or a number".to_string()),
    };
    match (&mut top.value, fold) {
        (PVal::Dict(map), _) => map.push((key, v.value)),
        (PVal::Folded(n), Some(fold)) => fold.pair(*n, &key, v.value)?,
        _ => return Err("SETITEM on something that is not a dict".to_string()),
    }
    Ok(())
}

/// Why an opcode is refused.
fn refused(op: u8) -> String {
    let name = match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        0x82..=0x84 => "EXT",
        b'P' | b'Q' => "PERSID",
        _ => return format!("opcode 0x{op:02x} is not one the Flight Recorder writes"),
    };
    format!("opcode {name} would import or call code, which a dump never needs; refused")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_dumps_opcodes_decode() {
        // {"a": [1, 300, 70000, None, True, (b, -2)], "b": 1.5}, protocol 2
        // with memo puts and gets, as torch's pickler writes them.
        let p = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01](K\x01M,\x01Jp\x11\x01\x00N\x88h\x01\x8a\x01\xfe\x86eX\x01\x00\x00\x00bG?\xf8\x00\x00\x00\x00\x00\x00u.";
        let v = decode(p, &[]).expect("decodes");
        let json = serde_json::json!({"a": [1, 300, 70000, null, true, ["a", -2]], "b": 1.5});
        assert_eq!(v, PVal::from_json(json));
    }

    #[test]
    fn code_calling_opcodes_are_refused_by_name() {
        let e = decode(b"cos\nsystem\n(S'touch /tmp/x'\ntR.", &[]).expect_err("refused");
        assert!(e.contains("GLOBAL"), "{e}");
        let e = decode(b"\x80\x04\x8c\x02os\x8c\x06system\x93.", &[]).expect_err("refused");
        assert!(e.contains("STACK_GLOBAL"), "{e}");
    }

    #[test]
    fn truncated_deep_and_bombs_end_in_errors() {
        assert!(decode(b"\x80\x02}q\x00(X\x07\x00\x00\x00ver", &[]).is_err());
        assert!(decode(b"", &[]).is_err());
        let mut deep = b"\x80\x02".to_vec();
        deep.extend(std::iter::repeat_n(b'(', 100_000));
        deep.extend(std::iter::repeat_n(b'l', 100_000));
        deep.push(b'.');
        assert!(decode(&deep, &[]).expect_err("too deep").contains("deeper"));
        let mut deep = b"\x80\x02".to_vec();
        for _ in 0..100_000 {
            deep.extend(b"]");
        }
        for _ in 0..99_999 {
            deep.extend(b"a");
        }
        deep.push(b'.');
        assert!(decode(&deep, &[]).expect_err("too deep").contains("deeper"));
        let mut bomb = b"\x80\x02]q\x00".to_vec();
        for i in 1..=40u8 {
            bomb.extend(b"(");
            bomb.extend(std::iter::repeat_n([b'h', i - 1], 10).flatten());
            bomb.extend([b'l', b'q', i]);
        }
        bomb.push(b'.');
        assert!(decode(&bomb, &[]).expect_err("bomb").contains("memo bomb"));
    }

    /// A pickle of `n` Nones in one list, then `tail`.
    fn nones_then(n: usize, tail: &[u8]) -> Vec<u8> {
        let mut p = b"\x80\x02](".to_vec();
        p.extend(std::iter::repeat_n(b'N', n));
        p.push(b'e');
        p.extend(tail);
        p.push(b'.');
        p
    }

    #[test]
    fn memo_stores_of_a_big_list_are_charged_before_the_copy() {
        // 20,000 copies of a 10,000-value list from 110 kB of input: each
        // memo store copies the list, 200 million values unless charged.
        let mut puts = Vec::new();
        for key in 0..20_000u32 {
            puts.push(b'r');
            puts.extend(key.to_le_bytes());
        }
        let e = decode(&nones_then(10_000, &puts), &[]).expect_err("bomb");
        assert!(e.contains("memo bomb"), "{e}");
        let dups = vec![b'2'; 100_000];
        let e = decode(&nones_then(10_000, &dups), &[]).expect_err("bomb");
        assert!(e.contains("memo bomb"), "{e}");
    }

    #[test]
    fn a_memo_key_past_the_next_one_is_refused() {
        // One far key would make room for 16 million memo entries.
        let e = decode(&nones_then(1 << 20, b"r\x00\x24\xf4\x00"), &[]).expect_err("refused");
        assert!(e.contains("memo key 16000000"), "{e}");
        // Keys in order, and a key stored again, decode.
        let v =
            decode(b"\x80\x02(K\x01q\x00K\x02q\x01K\x03q\x00h\x00h\x01l.", &[]).expect("decodes");
        assert_eq!(v, PVal::List([1, 2, 3, 3, 2].map(PVal::Int).to_vec()));
    }

    /// A torch 2.15 gloo dump, 8 entries of 5 frames each.
    fn real_dump() -> Vec<u8> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/flight_recorder/finished/comm_lib_trace_rank_1"
        );
        std::fs::read(path).expect("the fixture")
    }

    fn entries<'v, 'a>(doc: &'v PVal<'a>) -> &'v [PVal<'a>] {
        let PVal::Dict(top) = doc else {
            panic!("a dict")
        };
        match top.iter().find(|(k, _)| k == "entries") {
            Some((_, PVal::List(l))) => l,
            _ => panic!("entries"),
        }
    }

    #[test]
    fn unread_frames_are_skipped_and_every_other_key_reads_as_in_full() {
        let bytes = real_dump();
        let full = decode(&bytes, &[]).expect("decodes");
        let skipped = decode(&bytes, &["frames"]).expect("decodes");
        let (full, skipped) = (entries(&full), entries(&skipped));
        assert_eq!(full.len(), 8);
        for (f, s) in full.iter().zip(skipped) {
            let (PVal::Dict(f), PVal::Dict(s)) = (f, s) else {
                panic!("dicts")
            };
            assert_eq!(f.len(), s.len());
            for ((fk, fv), (sk, sv)) in f.iter().zip(s) {
                assert_eq!(fk, sk);
                if fk == "frames" {
                    assert!(matches!(fv, PVal::List(l) if l.len() == 5), "{fv:?}");
                    assert_eq!(sv, &PVal::Skipped);
                } else {
                    // The keys after `frames` (input_dtypes, ...) are read.
                    assert_eq!(fv, sv, "{fk}");
                }
            }
        }
    }

    /// The pairs a fold was handed, by dict.
    #[derive(Default)]
    struct Pairs<'a>(Vec<Vec<(String, PVal<'a>)>>);

    impl<'a> Fold<'a> for Pairs<'a> {
        fn key(&self) -> &str {
            "entries"
        }
        fn open(&mut self) -> Result<usize, String> {
            self.0.push(Vec::new());
            Ok(self.0.len() - 1)
        }
        fn pair(&mut self, n: usize, key: &str, value: PVal<'a>) -> Result<(), String> {
            self.0[n].push((key.to_string(), value));
            Ok(())
        }
    }

    #[test]
    fn the_dicts_of_the_folded_list_go_to_the_fold_pair_by_pair() {
        let bytes = real_dump();
        let full = decode(&bytes, &["frames"]).expect("decodes");
        let mut pairs = Pairs::default();
        let folded = decode_folding(&bytes, &["frames"], Some(&mut pairs)).expect("decodes");
        let numbers: Vec<PVal> = (0..8).map(PVal::Folded).collect();
        assert_eq!(entries(&folded), numbers.as_slice());
        // Each entry's pairs, in order, are the dict's that a plain decode
        // builds; the dump's other keys are built as ever.
        for (built, got) in entries(&full).iter().zip(&pairs.0) {
            let PVal::Dict(built) = built else {
                panic!("a dict")
            };
            let got: Vec<_> = got
                .iter()
                .map(|(k, v)| (Cow::from(k.as_str()), v.clone()))
                .collect();
            assert_eq!(built, &got);
        }
        let (PVal::Dict(a), PVal::Dict(b)) = (&full, &folded) else {
            panic!("dicts")
        };
        let others = |d: &[(Cow<str>, PVal)]| d.iter().filter(|(k, _)| k != "entries").count();
        assert_eq!((others(a), others(b)), (a.len() - 1, b.len() - 1));
        assert!(a
            .iter()
            .zip(b)
            .all(|(x, y)| x.0 == y.0 && (x.0 == "entries" || x.1 == y.1)));
    }

    #[test]
    fn a_folded_dict_named_twice_is_one_dict_and_other_dicts_are_built() {
        // {"entries": [{"a": 1}, <memo of the first>], "x": [{"b": 2}]}:
        // the second item is the same dict; a dict under another key is
        // built.
        // Python's pickle.dumps(protocol=2) of it.
        let p = b"\x80\x02}q\x00(X\x07\x00\x00\x00entriesq\x01]q\x02(}q\x03X\x01\x00\x00\x00aq\x04K\x01sh\x03eX\x01\x00\x00\x00xq\x05]q\x06}q\x07X\x01\x00\x00\x00bq\x08K\x02sau.";
        let mut pairs = Pairs::default();
        let v = decode_folding(p, &[], Some(&mut pairs)).expect("decodes");
        let want = PVal::Dict(vec![
            (
                "entries".into(),
                PVal::List(vec![PVal::Folded(0), PVal::Folded(0)]),
            ),
            (
                "x".into(),
                PVal::List(vec![PVal::Dict(vec![("b".into(), PVal::Int(2))])]),
            ),
        ]);
        assert_eq!(v, want);
        assert_eq!(pairs.0, [vec![("a".to_string(), PVal::Int(1))]]);
        // An error of the fold is the pickle's, at its byte.
        struct Refuses;
        impl<'a> Fold<'a> for Refuses {
            fn key(&self) -> &str {
                "entries"
            }
            fn open(&mut self) -> Result<usize, String> {
                Ok(0)
            }
            fn pair(&mut self, _: usize, key: &str, _: PVal<'a>) -> Result<(), String> {
                Err(format!("{key} refused"))
            }
        }
        let e = decode_folding(p, &[], Some(&mut Refuses)).expect_err("refused");
        assert!(e.contains("a refused at byte"), "{e}");
    }

    #[test]
    fn strings_are_borrowed_and_bad_utf8_is_replaced() {
        let v = decode(b"\x80\x02X\x03\x00\x00\x00abc.", &[]).expect("decodes");
        assert!(matches!(v, PVal::Str(Cow::Borrowed("abc"))));
        let v = decode(b"\x80\x02X\x02\x00\x00\x00a\xff.", &[]).expect("decodes");
        assert_eq!(v, PVal::Str(Cow::Owned("a\u{fffd}".to_string())));
        // A memo reference to a string is the same string.
        let v = decode(b"\x80\x02(X\x01\x00\x00\x00kq\x00h\x00l.", &[]).expect("decodes");
        assert_eq!(v, PVal::List(vec![PVal::Str("k".into()); 2]));
    }

    #[test]
    fn an_unread_value_is_bounded_like_any_other() {
        // {"frames": [[[...]]]} 100,000 deep: skipped, and still refused.
        let mut deep = b"\x80\x02}X\x06\x00\x00\x00frames".to_vec();
        deep.extend(std::iter::repeat_n(b']', 100_000));
        deep.extend(std::iter::repeat_n(b'a', 99_999));
        deep.extend(b"s.");
        let e = decode(&deep, &["frames"]).expect_err("too deep");
        assert!(e.contains("deeper"), "{e}");
        // A memo bomb under an unread key is charged as one anywhere.
        let mut bomb = b"\x80\x02}X\x06\x00\x00\x00frames]q\x00".to_vec();
        for i in 1..=40u8 {
            bomb.extend(b"(");
            bomb.extend(std::iter::repeat_n([b'h', i - 1], 10).flatten());
            bomb.extend([b'l', b'q', i]);
        }
        bomb.extend(b"s.");
        let e = decode(&bomb, &["frames"]).expect_err("bomb");
        assert!(e.contains("memo bomb"), "{e}");
        // Not a container: kept as it is.
        let v = decode(b"\x80\x02}X\x06\x00\x00\x00framesK\x05s.", &["frames"]).expect("decodes");
        assert_eq!(v, PVal::Dict(vec![("frames".into(), PVal::Int(5))]));
    }
}
