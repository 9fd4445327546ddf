//! The example inputPolicy and toolPolicy guest (guests/examples/README.md) in Rust,
//! `no_std`, without an allocator, on the SDK in `sdk/rust`. Built by
//! build.sh with Debian's rustc (packages rustc, libstd-rust-dev-wasm32).
#![no_std]

use agenthost_guest::{
    alloc_region, error, manifest_hooks, pack, tool_decision, Action, Decision, Hook, Region, Request, ToolRequest, Verdict,
};

const ACTIONS: [Action; 4] = [Action::Queue, Action::Inject, Action::Interrupt, Action::Reject];
const HOOKS: [Hook; 2] = [Hook::InputPolicy, Hook::ToolPolicy];

// Results and the request region. A guest instance is single-threaded and
// the host makes one call at a time, so plain statics are enough.
static mut OUT: [u8; 256] = [0; 256];
static mut REGION: Region = Region::new();

fn out() -> &'static mut [u8; 256] {
    unsafe { &mut *core::ptr::addr_of_mut!(OUT) }
}

fn result(n: usize) -> u64 {
    pack(out().as_ptr() as u32, n as u32)
}

/// The policy, on a decoded request.
fn decide(r: &Request) -> Decision {
    let action = if r.hint == b"stop" {
        Action::Interrupt
    } else if r.active && r.hint == b"refine" {
        Action::Inject
    } else if r.content.is_empty() {
        Action::Reject
    } else {
        return Decision { action: Action::Queue, coalesce_pending: r.queued > 0 };
    };
    Decision { action, coalesce_pending: false }
}

#[no_mangle]
pub extern "C" fn agenthost_abi_version() -> i32 {
    1
}

#[no_mangle]
pub extern "C" fn agenthost_alloc(size: u32) -> u32 {
    alloc_region(unsafe { &mut *core::ptr::addr_of_mut!(REGION) }, size)
}

#[no_mangle]
pub extern "C" fn agenthost_manifest() -> u64 {
    match manifest_hooks(out(), "example-rust", "1.0.0", &HOOKS, &ACTIONS) {
        Some(n) => result(n),
        None => result(error(out(), "manifest does not fit")),
    }
}

#[no_mangle]
pub extern "C" fn agenthost_input_policy(ptr: *const u8, len: u32) -> u64 {
    let req = unsafe { core::slice::from_raw_parts(ptr, len as usize) };
    match Request::parse(req) {
        Ok(r) => {
            out()[..4].copy_from_slice(&decide(&r).encode());
            result(4)
        }
        Err(e) => result(error(out(), e.message())),
    }
}

/// The tool policy, on the tool's name: deny shell_exec, ask one person
/// before a tool whose name contains "delete" runs, allow the rest.
fn decide_tool(tool: &[u8]) -> (Verdict, u8, &'static str) {
    if tool == b"shell_exec" {
        (Verdict::Deny, 0, "shell_exec is not allowed")
    } else if tool.windows(6).any(|w| w == b"delete") {
        (Verdict::Ask, 1, "Approve this deletion?")
    } else {
        (Verdict::Allow, 0, "")
    }
}

#[no_mangle]
pub extern "C" fn agenthost_tool_policy(ptr: *const u8, len: u32) -> u64 {
    let req = unsafe { core::slice::from_raw_parts(ptr, len as usize) };
    match ToolRequest::parse(req) {
        Ok(r) => {
            let (verdict, approvals, text) = decide_tool(r.tool);
            result(tool_decision(out(), verdict, approvals, text))
        }
        Err(e) => result(error(out(), e.message())),
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}
