//! A fast path for the common OpenAI stream chunk: one pass over the event's bytes that finds what
//! [`crate::chunk::parse`] says of a plain content chunk — whether it is a content chunk (by
//! [`ChunkContent`]: any choice's `text`, `delta.content`, `delta.reasoning_content` or
//! `delta.reasoning` non-empty) and the last non-null `finish_reason` of its choices — without
//! building anything.
//!
//! It is an optimisation only, never a second definition: [`scan`] answers only when it is certain
//! that the serde path ([`crate::chunk::parse_serde`]) would decide the same, and declines
//! (`None`) otherwise, leaving the event to serde. It declines on anything it does not fully
//! check:
//! - events carrying a non-null `usage`, `metrics`, `error` or `message` (rare: the last chunk or
//!   two of a stream), or `"object": "error"`;
//! - any `\u` escape, any other byte sequence serde_json would reject or might read differently
//!   (control characters in strings, bad escapes, malformed numbers or literals, trailing bytes,
//!   invalid UTF-8, nesting deeper than 64), duplicate fields that serde rejects, a `choices`
//!   element or `delta` that is not an object, a `finish_reason` with an escape.
//!
//! The tests of [`crate::chunk`] check [`scan`] against the serde path on the real vLLM
//! fixtures, on hand-made edge cases and on many seeded random mutations of real chunks.

use headroom_core::signal::{ChoiceText, ChunkContent};

/// What the fast path found in one chunk (re-exported as [`crate::chunk::Plain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan<'a> {
    /// A content chunk ([`ChunkContent`]).
    pub content: bool,
    /// The last `finish_reason` of its choices that is a string.
    pub finish_reason: Option<&'a str>,
}

/// Scans one event's data; `None` when the serde path must decide (see the module docs).
pub(crate) fn scan(data: &[u8]) -> Option<Scan<'_>> {
    let mut c = Cursor {
        b: data,
        i: 0,
        non_ascii: false,
        depth: 0,
    };
    c.ws();
    if c.peek()? != b'{' {
        return None;
    }
    let mut out = Scan {
        content: false,
        finish_reason: None,
    };
    let (mut seen_choices, mut seen_object) = (false, false);
    let mut seen = Seen::default();
    let mut content = ChunkContent::default();
    c.object(|c, key| match key {
        b"choices" => {
            if std::mem::replace(&mut seen_choices, true) {
                return None;
            }
            c.choices(&mut out, &mut content)
        }
        b"object" => {
            if std::mem::replace(&mut seen_object, true) {
                return None;
            }
            match c.peek()? {
                b'"' => {
                    let (s, _) = c.string()?;
                    // Escapes other than `\u` (declined) never produce a letter of "error".
                    (s != b"error").then_some(())
                }
                b'n' => c.literal(b"null"),
                _ => None,
            }
        }
        // Non-null ones are left to serde.
        b"usage" | b"metrics" | b"error" | b"message" => {
            if std::mem::replace(seen.field(key), true) {
                return None;
            }
            c.literal(b"null")
        }
        _ => c.skip_value(),
    })?;
    out.content = content.is_content();
    c.ws();
    if c.i != data.len() {
        return None;
    }
    if c.non_ascii {
        std::str::from_utf8(data).ok()?;
    }
    Some(out)
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
    /// A byte ≥ 0x80 was seen inside a string (UTF-8 is then checked once, at the end).
    non_ascii: bool,
    depth: u32,
}

const MAX_DEPTH: u32 = 64;

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// JSON whitespace, as serde_json accepts it.
    #[inline(always)]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    #[inline(always)]
    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        let end = self.i + lit.len();
        (self.b.get(self.i..end)? == lit).then(|| self.i = end)
    }

    /// A string at `"`: its raw content and whether it had an escape. Declines `\u` escapes,
    /// unknown escapes and control characters.
    #[inline(always)]
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        self.i += 1;
        let start = self.i;
        let mut escaped = false;
        loop {
            self.skip_plain();
            match *self.b.get(self.i)? {
                b'"' => {
                    let s = &self.b[start..self.i];
                    self.i += 1;
                    return Some((s, escaped));
                }
                b'\\' => {
                    match *self.b.get(self.i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        _ => return None,
                    }
                    escaped = true;
                    self.i += 2;
                }
                0..=0x1f => return None,
                0x80.. => {
                    self.non_ascii = true;
                    self.i += 1;
                }
                _ => self.i += 1,
            }
        }
    }

    /// Advances over string bytes that need no attention (printable ASCII other than `"` and
    /// `\`), eight at a time: stops at the first byte that is `"`, `\`, below 0x20 or above
    /// 0x7F, or where fewer than eight bytes are left.
    #[inline(always)]
    fn skip_plain(&mut self) {
        const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
        const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
        // Bytes equal to zero get their high bit set (exact for the lowest such byte, which is
        // all that is used: a borrow only runs upwards from a true zero byte).
        let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
        while let Some(w) = self.b.get(self.i..self.i + 8) {
            let w = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            let special = zero(w ^ (ONES * u64::from(b'"')))
                | zero(w ^ (ONES * u64::from(b'\\')))
                | (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
                | (w & HIGH);
            if special != 0 {
                self.i += (special.trailing_zeros() / 8) as usize;
                return;
            }
            self.i += 8;
        }
    }

    #[inline(always)]
    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - start
    }

    /// A number in JSON's grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    /// Any JSON value, checked as serde_json checks an ignored one (or stricter).
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => self.object(|c, _| c.skip_value()),
            b'[' => self.array(|c| c.skip_value()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// An object at `{`; `field` is called with each key (escape-free, else declined) and the
    /// cursor at its value, and must consume the value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.i += 1;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            self.depth -= 1;
            return Some(());
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            let (key, escaped) = self.string()?;
            if escaped {
                return None;
            }
            self.ws();
            if self.peek()? != b':' {
                return None;
            }
            self.i += 1;
            self.ws();
            field(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    self.depth -= 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array at `[`; `element` is called with the cursor at each element.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.i += 1;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            self.depth -= 1;
            return Some(());
        }
        loop {
            element(self)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b']' => {
                    self.i += 1;
                    self.depth -= 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `choices`: null or a list of objects, each read.
    fn choices(&mut self, out: &mut Scan<'a>, content: &mut ChunkContent) -> Option<()> {
        match self.peek()? {
            b'n' => self.literal(b"null"),
            b'[' => self.array(|c| {
                if c.peek()? != b'{' {
                    return None;
                }
                c.choice(out, content)
            }),
            _ => None,
        }
    }

    /// A string-or-null field read as "present and non-empty" (every escape is at least one
    /// character, so the raw content is empty exactly when the decoded one is).
    #[inline(always)]
    fn non_empty(&mut self) -> Option<bool> {
        match self.peek()? {
            b'"' => self.string().map(|(s, _)| !s.is_empty()),
            b'n' => self.literal(b"null").map(|()| false),
            _ => None,
        }
    }

    fn choice(&mut self, out: &mut Scan<'a>, content: &mut ChunkContent) -> Option<()> {
        let (mut text, mut delta, mut finish) = (None, None, None);
        self.object(|c, key| match key {
            b"text" => {
                if text.is_some() {
                    return None;
                }
                text = Some(c.non_empty()?);
                Some(())
            }
            b"delta" => {
                if delta.is_some() {
                    return None;
                }
                delta = Some(match c.peek()? {
                    b'n' => {
                        c.literal(b"null")?;
                        ChoiceText::default()
                    }
                    b'{' => c.delta()?,
                    _ => return None,
                });
                Some(())
            }
            b"finish_reason" => {
                if finish.is_some() {
                    return None;
                }
                finish = Some(match c.peek()? {
                    b'n' => {
                        c.literal(b"null")?;
                        None
                    }
                    b'"' => {
                        let (s, escaped) = c.string()?;
                        if escaped {
                            return None;
                        }
                        Some(s)
                    }
                    _ => return None,
                });
                Some(())
            }
            _ => c.skip_value(),
        })?;
        content.choice(ChoiceText {
            text: text.unwrap_or(false),
            ..delta.unwrap_or_default()
        });
        if let Some(Some(s)) = finish {
            // Valid UTF-8 unless a non-ASCII byte was seen, which `scan` checks before answering.
            out.finish_reason = Some(std::str::from_utf8(s).ok()?);
        }
        Some(())
    }

    /// `delta`: which of `content`, `reasoning_content` and `reasoning` are non-empty.
    fn delta(&mut self) -> Option<ChoiceText> {
        let mut seen = [false; 3];
        let mut t = ChoiceText::default();
        self.object(|c, key| {
            let (k, field) = match key {
                b"content" => (0, &mut t.content),
                b"reasoning_content" => (1, &mut t.reasoning_content),
                b"reasoning" => (2, &mut t.reasoning),
                _ => return c.skip_value(),
            };
            if std::mem::replace(&mut seen[k], true) {
                return None;
            }
            *field = c.non_empty()?;
            Some(())
        })?;
        Some(t)
    }
}

/// Top-level fields read as `null` only, each at most once (serde rejects a duplicate).
#[derive(Default)]
struct Seen {
    usage: bool,
    metrics: bool,
    error: bool,
    message: bool,
}

impl Seen {
    fn field(&mut self, key: &[u8]) -> &mut bool {
        match key {
            b"usage" => &mut self.usage,
            b"metrics" => &mut self.metrics,
            b"error" => &mut self.error,
            _ => &mut self.message,
        }
    }
}
