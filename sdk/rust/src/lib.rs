//! Thin SDK for agenthost wasm `inputPolicy` and `toolPolicy` guests, ABI v1
//! (`abi/guestabi/SPEC.md`): decode the requests, encode the decisions, write
//! the manifest, and hand out the request region.
//!
//! `no_std` and without an allocator: the request is read in place (its
//! strings are byte slices of the host's request), and results are written
//! into static buffers the guest owns. Build a guest as a `cdylib` for
//! `wasm32-unknown-unknown` with `-C panic=abort`; `guests/examples/rust`
//! is a complete one, built with Debian's `rustc` and no cargo.
#![cfg_attr(not(test), no_std)]

/// An inputPolicy action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Action {
    Queue = 1,
    Inject = 2,
    Interrupt = 3,
    Reject = 4,
}

impl Action {
    /// The action's name in the manifest.
    pub const fn name(self) -> &'static str {
        match self {
            Action::Queue => "queue",
            Action::Inject => "inject",
            Action::Interrupt => "interrupt",
            Action::Reject => "reject",
        }
    }
}

/// A decision: an action and the coalescePending flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    pub coalesce_pending: bool,
}

impl Decision {
    /// The result body: status 0, the action, the flags, a reserved 0.
    pub const fn encode(self) -> [u8; 4] {
        [0, self.action as u8, self.coalesce_pending as u8, 0]
    }
}

/// A hook a guest declares in its manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    InputPolicy,
    PrepareStep,
    ToolPolicy,
}

impl Hook {
    /// The hook's name in the manifest.
    pub const fn name(self) -> &'static str {
        match self {
            Hook::InputPolicy => "inputPolicy",
            Hook::PrepareStep => "prepareStep",
            Hook::ToolPolicy => "toolPolicy",
        }
    }
}

/// A toolPolicy decision (SPEC §14.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Verdict {
    /// Run the call.
    Allow = 1,
    /// Do not run it; the model sees the text as the tool's result.
    Deny = 2,
    /// Wait for people to approve it; they are shown the text.
    Ask = 3,
}

/// The longest text (deny message, ask prompt) the host keeps.
pub const MAX_TOOL_TEXT: usize = 4096;
/// The most approvals an ask may require.
pub const MAX_APPROVALS: u8 = 16;

/// A toolPolicy request decoded in place: the strings borrow the request's
/// bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolRequest<'a> {
    /// The model step that asked for the call, from 1.
    pub step: u32,
    pub tool: &'a [u8],
    /// The MCP server providing the tool; empty for a tool of the host's.
    pub server: &'a [u8],
    /// The arguments, JSON text as the model produced it (not validated).
    pub arguments: &'a [u8],
    pub call_id: &'a [u8],
    pub idempotency_key: &'a [u8],
    pub run_id: &'a [u8],
    pub thread_id: &'a [u8],
}

impl<'a> ToolRequest<'a> {
    /// Decodes a toolPolicy request.
    pub fn parse(b: &'a [u8]) -> Result<ToolRequest<'a>, Error> {
        if b.len() < 8 {
            return Err(Error::Truncated);
        }
        if b[0] != 1 {
            return Err(Error::Layout(b[0]));
        }
        let mut fields: [&[u8]; 7] = [&[]; 7];
        let mut rest = &b[8..];
        for f in fields.iter_mut() {
            let (s, r) = read_str(rest).ok_or(Error::Truncated)?;
            *f = s;
            rest = r;
        }
        Ok(ToolRequest {
            step: le32(b, 4).unwrap_or(0),
            tool: fields[0],
            server: fields[1],
            arguments: fields[2],
            call_id: fields[3],
            idempotency_key: fields[4],
            run_id: fields[5],
            thread_id: fields[6],
        })
    }
}

/// Writes a toolPolicy decision into `buf`: status 0, the verdict, the
/// approvals (ask only; 0 means 1, more than 16 are cut to 16), a reserved
/// 0, then `text` (deny's message or ask's prompt; ignored for allow), cut
/// to fit `buf` and `MAX_TOOL_TEXT`. Returns the body's length; 0 if `buf`
/// is shorter than 4 bytes.
pub fn tool_decision(buf: &mut [u8], verdict: Verdict, approvals: u8, text: &str) -> usize {
    if buf.len() < 4 {
        return 0;
    }
    let approvals = if verdict == Verdict::Ask { approvals.min(MAX_APPROVALS) } else { 0 };
    buf[..4].copy_from_slice(&[0, verdict as u8, approvals, 0]);
    if verdict == Verdict::Allow {
        return 4;
    }
    let n = text.len().min(buf.len() - 4).min(MAX_TOOL_TEXT);
    buf[4..4 + n].copy_from_slice(&text.as_bytes()[..n]);
    4 + n
}

/// Why a request does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Shorter than its fixed header or a length runs past its end.
    Truncated,
    /// A layout version other than 1.
    Layout(u8),
}

impl Error {
    /// A message for an error result.
    pub const fn message(self) -> &'static str {
        match self {
            Error::Truncated => "request does not decode: truncated",
            Error::Layout(_) => "request does not decode: unknown layout version",
        }
    }
}

/// The fields of an inputPolicy request a policy usually reads, decoded in
/// place: the strings borrow the request's bytes. `rest` holds what follows
/// the hint (metadata, then the runs) for a policy that needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// The thread has an active run.
    pub active: bool,
    /// Steps the active run has finished.
    pub active_steps: u32,
    /// Number of queued runs.
    pub queued: u32,
    /// Number of metadata pairs.
    pub metadata: u32,
    pub thread_id: &'a [u8],
    pub content: &'a [u8],
    pub hint: &'a [u8],
    pub rest: &'a [u8],
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Reads a `str` (u32 length, bytes) at the start of `b`: the string and
/// what follows it.
pub fn read_str(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = le32(b, 0)? as usize;
    let body = b.get(4..)?;
    if body.len() < n {
        return None;
    }
    Some(body.split_at(n))
}

impl<'a> Request<'a> {
    /// Decodes the header, the thread id, the content and the hint.
    pub fn parse(b: &'a [u8]) -> Result<Request<'a>, Error> {
        if b.len() < 16 {
            return Err(Error::Truncated);
        }
        if b[0] != 1 {
            return Err(Error::Layout(b[0]));
        }
        let (thread_id, r) = read_str(&b[16..]).ok_or(Error::Truncated)?;
        let (content, r) = read_str(r).ok_or(Error::Truncated)?;
        let (hint, rest) = read_str(r).ok_or(Error::Truncated)?;
        Ok(Request {
            active: b[1] & 1 != 0,
            active_steps: le32(b, 4).unwrap_or(0),
            queued: le32(b, 8).unwrap_or(0),
            metadata: le32(b, 12).unwrap_or(0),
            thread_id,
            content,
            hint,
            rest,
        })
    }
}

/// Writes status 0 and the manifest JSON of an inputPolicy guest into `buf`,
/// returning the body's length, or `None` if `buf` is too small. Name and
/// version are escaped.
pub fn manifest(buf: &mut [u8], name: &str, version: &str, actions: &[Action]) -> Option<usize> {
    manifest_hooks(buf, name, version, &[Hook::InputPolicy], actions)
}

/// Writes status 0 and the manifest JSON into `buf`, declaring `hooks` and,
/// when not empty, `actions` (required with `Hook::InputPolicy`). Returns
/// the body's length, or `None` if `buf` is too small.
pub fn manifest_hooks(buf: &mut [u8], name: &str, version: &str, hooks: &[Hook], actions: &[Action]) -> Option<usize> {
    let mut w = Writer { buf, n: 0 };
    w.raw(b"\0{\"abi\":1,\"name\":")?;
    w.string(name)?;
    w.raw(b",\"version\":")?;
    w.string(version)?;
    w.raw(b",\"hooks\":[")?;
    for (i, h) in hooks.iter().enumerate() {
        if i > 0 {
            w.raw(b",")?;
        }
        w.string(h.name())?;
    }
    w.raw(b"]")?;
    if !actions.is_empty() {
        w.raw(b",\"actions\":[")?;
        for (i, a) in actions.iter().enumerate() {
            if i > 0 {
                w.raw(b",")?;
            }
            w.string(a.name())?;
        }
        w.raw(b"]")?;
    }
    w.raw(b"}")?;
    Some(w.n)
}

/// Writes status 1 and `msg` into `buf` (cut to fit), returning the length.
pub fn error(buf: &mut [u8], msg: &str) -> usize {
    if buf.is_empty() {
        return 0;
    }
    buf[0] = 1;
    let n = msg.len().min(buf.len() - 1);
    buf[1..1 + n].copy_from_slice(&msg.as_bytes()[..n]);
    1 + n
}

struct Writer<'b> {
    buf: &'b mut [u8],
    n: usize,
}

impl Writer<'_> {
    fn raw(&mut self, b: &[u8]) -> Option<()> {
        let dst = self.buf.get_mut(self.n..self.n + b.len())?;
        dst.copy_from_slice(b);
        self.n += b.len();
        Some(())
    }

    fn string(&mut self, s: &str) -> Option<()> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        self.raw(b"\"")?;
        for &c in s.as_bytes() {
            match c {
                b'"' | b'\\' => self.raw(&[b'\\', c])?,
                0..=0x1f => self.raw(&[b'\\', b'u', b'0', b'0', HEX[(c >> 4) as usize], HEX[(c & 15) as usize]])?,
                _ => self.raw(&[c])?,
            }
        }
        self.raw(b"\"")
    }
}

/// Packs a result's address and length as the hooks return them.
pub fn pack(ptr: u32, len: u32) -> u64 {
    (ptr as u64) << 32 | len as u64
}

/// The request region, at the end of linear memory and grown in place when a
/// request does not fit: correct as long as nothing else grows memory (true
/// of a guest without an allocator). Never at address 0.
pub struct Region {
    start: u32,
    cap: u32,
}

impl Region {
    pub const fn new() -> Region {
        Region { start: 0, cap: 0 }
    }

    /// A region of at least `size` bytes, or 0 if memory cannot grow.
    /// `pages` is the memory's size in 64 KiB pages and `grow` grows it by
    /// the given pages, returning the old size or `usize::MAX` on failure
    /// (`core::arch::wasm32::memory_size`/`memory_grow`).
    pub fn alloc(&mut self, size: u32, pages: usize, grow: impl FnOnce(usize) -> usize) -> u32 {
        if size <= self.cap {
            return self.start;
        }
        let end = (pages as u64) << 16;
        if self.start as u64 + self.cap as u64 != end {
            if end > u32::MAX as u64 {
                return 0;
            }
            self.start = end as u32;
            self.cap = 0;
        }
        let need = ((size - self.cap) as usize + 0xffff) >> 16;
        if grow(need) == usize::MAX {
            return 0;
        }
        self.cap += (need as u32) << 16;
        self.start
    }
}

impl Default for Region {
    fn default() -> Self {
        Region::new()
    }
}

/// Grows the wasm memory for `Region::alloc`.
#[cfg(target_arch = "wasm32")]
pub fn alloc_region(r: &mut Region, size: u32) -> u32 {
    r.alloc(size, core::arch::wasm32::memory_size(0), |n| core::arch::wasm32::memory_grow(0, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(flags: u8, queued: u32, thread: &[u8], content: &[u8], hint: &[u8]) -> Vec<u8> {
        let mut b = vec![1, flags, 0, 0];
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&queued.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for s in [thread, content, hint] {
            b.extend_from_slice(&(s.len() as u32).to_le_bytes());
            b.extend_from_slice(s);
        }
        b
    }

    #[test]
    fn parses_the_spec_example() {
        // SPEC §8.1's example.
        let hex = "0101000002000000010000000100000001000000740200000068690600000072656669\
                   6e65010000006b01000000760100000061010000000000000002000000010000000100\
                   0000780100000071020000000000000000000000000000";
        let b: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        let r = Request::parse(&b).unwrap();
        assert!(r.active);
        assert_eq!((r.active_steps, r.queued, r.metadata), (2, 1, 1));
        assert_eq!((r.thread_id, r.content, r.hint), (&b"t"[..], &b"hi"[..], &b"refine"[..]));
        let (k, rest) = read_str(r.rest).unwrap();
        assert_eq!(k, b"k");
        assert_eq!(read_str(rest).unwrap().0, b"v");
    }

    #[test]
    fn refuses_bad_requests() {
        let good = request(0, 0, b"t", b"content", b"");
        assert!(Request::parse(&good).is_ok());
        for n in 0..good.len() {
            assert_eq!(Request::parse(&good[..n]), Err(Error::Truncated), "cut at {}", n);
        }
        let mut bad = good.clone();
        bad[0] = 2;
        assert_eq!(Request::parse(&bad), Err(Error::Layout(2)));
        let mut huge = good;
        huge[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Request::parse(&huge), Err(Error::Truncated));
    }

    #[test]
    fn encodes_decisions() {
        assert_eq!(Decision { action: Action::Interrupt, coalesce_pending: true }.encode(), [0, 3, 1, 0]);
        assert_eq!(Decision { action: Action::Queue, coalesce_pending: false }.encode(), [0, 1, 0, 0]);
        assert_eq!(Decision { action: Action::Reject, coalesce_pending: false }.encode(), [0, 4, 0, 0]);
    }

    #[test]
    fn writes_manifests() {
        let mut buf = [0u8; 256];
        let n = manifest(&mut buf, "ex\"a\n", "1.0.0", &[Action::Queue, Action::Inject]).unwrap();
        assert_eq!(
            &buf[..n],
            &b"\0{\"abi\":1,\"name\":\"ex\\\"a\\u000a\",\"version\":\"1.0.0\",\"hooks\":[\"inputPolicy\"],\"actions\":[\"queue\",\"inject\"]}"[..]
        );
        assert_eq!(manifest(&mut buf[..20], "x", "1", &[Action::Queue]), None);
        let n = error(&mut buf[..5], "abcdefgh");
        assert_eq!(&buf[..n], b"\x01abcd");
    }

    #[test]
    fn parses_tool_requests() {
        // SPEC §14.1's example.
        let hex = "0100000002000000 02000000726d 020000006673 020000007b7d \
                   0100000063 010000006b 0100000072 0100000074";
        let hex: String = hex.split_whitespace().collect();
        let b: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        let r = ToolRequest::parse(&b).unwrap();
        assert_eq!(r.step, 2);
        assert_eq!((r.tool, r.server, r.arguments), (&b"rm"[..], &b"fs"[..], &b"{}"[..]));
        assert_eq!((r.call_id, r.idempotency_key, r.run_id, r.thread_id), (&b"c"[..], &b"k"[..], &b"r"[..], &b"t"[..]));
        for n in 0..b.len() {
            assert_eq!(ToolRequest::parse(&b[..n]), Err(Error::Truncated), "cut at {}", n);
        }
        let mut bad = b.clone();
        bad[0] = 2;
        assert_eq!(ToolRequest::parse(&bad), Err(Error::Layout(2)));
    }

    #[test]
    fn encodes_tool_decisions() {
        let mut buf = [0u8; 16];
        let n = tool_decision(&mut buf, Verdict::Allow, 3, "ignored");
        assert_eq!(&buf[..n], &[0, 1, 0, 0]);
        let n = tool_decision(&mut buf, Verdict::Deny, 2, "no");
        assert_eq!(&buf[..n], b"\0\x02\0\0no");
        let n = tool_decision(&mut buf, Verdict::Ask, 40, "approve this call?");
        assert_eq!(&buf[..n], b"\0\x03\x10\0approve this");
        assert_eq!(tool_decision(&mut buf[..3], Verdict::Allow, 0, ""), 0);
    }

    #[test]
    fn writes_manifests_with_hooks() {
        let mut buf = [0u8; 256];
        let n = manifest_hooks(&mut buf, "t", "1", &[Hook::ToolPolicy], &[]).unwrap();
        assert_eq!(&buf[..n], &b"\0{\"abi\":1,\"name\":\"t\",\"version\":\"1\",\"hooks\":[\"toolPolicy\"]}"[..]);
        let n = manifest_hooks(&mut buf, "t", "1", &[Hook::InputPolicy, Hook::ToolPolicy], &[Action::Queue]).unwrap();
        assert_eq!(
            &buf[..n],
            &b"\0{\"abi\":1,\"name\":\"t\",\"version\":\"1\",\"hooks\":[\"inputPolicy\",\"toolPolicy\"],\"actions\":[\"queue\"]}"[..]
        );
    }

    #[test]
    fn regions_grow_in_place() {
        let mut pages = 2usize;
        let mut r = Region::new();
        let grow = |p: &mut usize, n: usize| {
            let old = *p;
            *p += n;
            old
        };
        let a = r.alloc(4096, pages, |n| grow(&mut pages, n));
        assert_eq!((a, pages), (2 << 16, 3));
        assert_eq!(r.alloc(65536, pages, |_| panic!("grew for a fitting request")), a);
        let b = r.alloc(200_000, pages, |n| grow(&mut pages, n));
        assert_eq!((b, pages), (a, 6)); // grown in place
        assert_eq!(r.alloc(1 << 20, pages, |_| usize::MAX), 0);
    }
}
