//! A one-pass reader for the common OpenAI stream chunk, in front of the serde path of
//! [`crate::sse::parse_data`].
//!
//! It is an optimisation only, never a second definition: [`scan`] answers only when it is
//! certain that the serde path would decide the same, and declines (`None`) otherwise. It
//! validates the whole event as JSON the way serde_json does (grammar, whitespace, literals,
//! numbers, UTF-8 of strings, nothing after the value) and declines on:
//! - anything that is not a JSON object at the top, a `choices` that is not an array of
//!   objects, a `delta` that is neither `null` nor an object, a `finish_reason` that is neither
//!   `null` nor a string (serde would fail, or read an array as a struct);
//! - a non-null `usage` or `error` (the last chunk or two of a stream: serde reads them);
//! - any backslash escape in a string, a control character in a string, invalid UTF-8;
//! - a field serde knows appearing twice in one object (serde rejects the event);
//! - nesting deeper than [`MAX_DEPTH`].
//!
//! The unit tests hold it to the serde path on the real vLLM fixtures, on hand-made edge cases
//! and on seeded random mutations of real chunks.

use crate::sse::{EventInfo, Finish};

/// Deepest nesting read (serde_json's own limit is 128).
const MAX_DEPTH: u32 = 64;

/// What a byte means inside a string: [`PLAIN`] ASCII, the closing [`QUOTE`], a [`HIGH`] byte
/// of a UTF-8 sequence (checked at the end), or [`STOP`] (backslash or control character: the
/// reader declines).
const PLAIN: u8 = 0;
const QUOTE: u8 = 1;
const HIGH: u8 = 2;
const STOP: u8 = 3;

static BYTE: [u8; 256] = {
    let mut t = [PLAIN; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = if i < 0x20 || i == b'\\' as usize {
            STOP
        } else if i == b'"' as usize {
            QUOTE
        } else if i >= 0x80 {
            HIGH
        } else {
            PLAIN
        };
        i += 1;
    }
    t
};

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
    depth: u32,
}

impl<'a> Cursor<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// A string without escapes or control characters, valid UTF-8; its contents.
    #[inline]
    fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        let mut ascii = true;
        loop {
            match BYTE[usize::from(*self.b.get(self.i)?)] {
                PLAIN => self.i += 1,
                QUOTE => break,
                HIGH => {
                    ascii = false;
                    self.i += 1;
                }
                _ => return None,
            }
        }
        let s = &self.b[start..self.i];
        if !ascii && std::str::from_utf8(s).is_err() {
            return None;
        }
        self.i += 1;
        Some(s)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    fn digits(&mut self) -> Option<()> {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        (self.i > start).then_some(())
    }

    /// A JSON number (RFC 8259 grammar; its value is not needed).
    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits()?,
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.digits()?;
        }
        Some(())
    }

    /// `null` if it comes next: `true` when it was read.
    fn null(&mut self) -> bool {
        self.literal(b"null").is_some()
    }

    /// Any JSON value, checked and skipped.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => self.object(|c, _| c.skip()),
            b'[' => self.array(|c| c.skip()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// An object: `field` reads each value (the cursor is on it) given its key.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.enter()?;
        self.ws();
        if self.eat(b'}').is_none() {
            loop {
                let key = self.string()?;
                self.ws();
                self.eat(b':')?;
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
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// An array: `item` reads each element (the cursor is on it).
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.enter()?;
        self.ws();
        if self.eat(b']').is_none() {
            loop {
                item(self)?;
                self.ws();
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        self.ws();
                    }
                    b']' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// A value read as `NonEmpty` reads it: a non-empty string is `true`, anything else `false`.
    fn non_empty(&mut self) -> Option<bool> {
        if self.peek()? == b'"' {
            return self.string().map(|s| !s.is_empty());
        }
        self.skip().map(|()| false)
    }
}

/// Sets `*seen`, or declines a field read twice (serde rejects duplicate fields).
fn first(seen: &mut bool) -> Option<()> {
    (!std::mem::replace(seen, true)).then_some(())
}

fn choice(c: &mut Cursor<'_>, info: &mut EventInfo) -> Option<()> {
    if c.peek()? != b'{' {
        return None;
    }
    let (mut text, mut delta, mut finish) = (false, false, false);
    let mut content = false;
    c.object(|c, key| {
        match key {
            b"text" => {
                first(&mut text)?;
                content |= c.non_empty()?;
            }
            b"delta" => {
                first(&mut delta)?;
                if !c.null() {
                    if c.peek()? != b'{' {
                        return None;
                    }
                    let (mut a, mut b, mut d) = (false, false, false);
                    c.object(|c, key| {
                        let seen = match key {
                            b"content" => &mut a,
                            b"reasoning_content" => &mut b,
                            b"reasoning" => &mut d,
                            _ => return c.skip(),
                        };
                        first(seen)?;
                        content |= c.non_empty()?;
                        Some(())
                    })?;
                }
            }
            b"finish_reason" => {
                first(&mut finish)?;
                if !c.null() {
                    info.finish = Some(match c.string()? {
                        b"length" => Finish::Length,
                        b"abort" | b"error" => Finish::Failed,
                        _ => Finish::Stop,
                    });
                }
            }
            _ => c.skip()?,
        }
        Some(())
    })?;
    info.content |= content;
    Some(())
}

/// What [`crate::sse::parse_data`] would say of `data` (a `data:` payload that is not
/// `[DONE]`), or `None` when only the serde path can say it (see the module doc).
pub(crate) fn scan(data: &[u8]) -> Option<EventInfo> {
    let mut c = Cursor {
        b: data,
        i: 0,
        depth: 0,
    };
    c.ws();
    if c.peek()? != b'{' {
        return None;
    }
    let mut info = EventInfo::default();
    let (mut choices, mut usage, mut error) = (false, false, false);
    c.object(|c, key| match key {
        b"choices" => {
            first(&mut choices)?;
            c.array(|c| choice(c, &mut info))
        }
        // Non-null `usage` and `error` are left to serde.
        b"usage" => {
            first(&mut usage)?;
            c.null().then_some(())
        }
        b"error" => {
            first(&mut error)?;
            c.null().then_some(())
        }
        _ => c.skip(),
    })?;
    c.ws();
    (c.i == data.len()).then_some(info)
}
