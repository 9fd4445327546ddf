//! The example inputPolicy guest (guests/examples/README.md) in Rust,
//! `no_std`, without an allocator, on the SDK in `sdk/rust`. Built by
//! build.sh with Debian's rustc (packages rustc, libstd-rust-dev-wasm32).
#![no_std]

use agenthost_guest::{alloc_region, error, manifest, pack, Action, Decision, Region, Request};

const ACTIONS: [Action; 4] = [Action::Queue, Action::Inject, Action::Interrupt, Action::Reject];

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
    match manifest(out(), "example-rust", "1.0.0", &ACTIONS) {
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

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}
