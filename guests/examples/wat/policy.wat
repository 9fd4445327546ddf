;; The example inputPolicy and toolPolicy guest (guests/examples/README.md) in WebAssembly
;; text, against agenthost wasm guest ABI v1 (abi/guestabi/SPEC.md).
;; No imports. Build: build.sh (wat2wasm, Debian package wabt).
(module
  (memory (export "memory") 1)

  ;; Static data in the first page. Nothing lives at address 0, which is the
  ;; "cannot allocate" answer of agenthost_alloc.
  ;; 16: the decision (status, action, flags, reserved), rewritten per call.
  ;; 32: an error result, status 1 and message (24 bytes).
  (data (i32.const 32) "\01request does not decode")
  ;; 64: the manifest result, status 0 and JSON (136 bytes).
  (data (i32.const 64) "\00{\"abi\":1,\"name\":\"example-wat\",\"version\":\"1.0.0\",\"hooks\":[\"inputPolicy\",\"toolPolicy\"],\"actions\":[\"queue\",\"inject\",\"interrupt\",\"reject\"]}")
  ;; 208: the tool decisions (status, decision, approvals, reserved, text):
  ;; allow (4 bytes); at 212, deny with its message (29 bytes); at 256, ask
  ;; one person with a prompt (26 bytes).
  (data (i32.const 208) "\00\01\00\00")
  (data (i32.const 212) "\00\02\00\00shell_exec is not allowed")
  (data (i32.const 256) "\00\03\01\00Approve this deletion?")

  ;; The request region: at the end of memory, grown in place when a request
  ;; does not fit (nothing else grows memory, so it stays at the end).
  (global $region (mut i32) (i32.const 0))
  (global $cap (mut i32) (i32.const 0))

  (func (export "agenthost_abi_version") (result i32) (i32.const 1))

  (func (export "agenthost_manifest") (result i64)
    (i64.const 0x4000000088)) ;; (64 << 32) | 136

  ;; agenthost_alloc: a region of at least $size bytes, or 0.
  (func (export "agenthost_alloc") (param $size i32) (result i32)
    (local $end i32) (local $pages i32)
    (if (i32.le_u (local.get $size) (global.get $cap))
      (then (return (global.get $region))))
    (local.set $end (i32.shl (memory.size) (i32.const 16)))
    (if (i32.ne (i32.add (global.get $region) (global.get $cap)) (local.get $end))
      (then ;; first region: start it at the end of memory
        (global.set $region (local.get $end))
        (global.set $cap (i32.const 0))))
    ;; pages = ceil((size - cap) / 65536)
    (local.set $pages
      (i32.shr_u (i32.add (i32.sub (local.get $size) (global.get $cap)) (i32.const 65535))
                 (i32.const 16)))
    (if (i32.eq (memory.grow (local.get $pages)) (i32.const -1))
      (then (return (i32.const 0))))
    (global.set $cap (i32.add (global.get $cap) (i32.shl (local.get $pages) (i32.const 16))))
    (global.get $region))

  ;; $str reads the u32 length at $p and checks that the string fits before
  ;; $end; it returns the address just past the string, or 0 if it does not.
  (func $str (param $p i32) (param $end i32) (result i32)
    (local $n i32)
    (if (i32.gt_u (i32.add (local.get $p) (i32.const 4)) (local.get $end))
      (then (return (i32.const 0))))
    (local.set $n (i32.load (local.get $p)))
    (if (i32.gt_u (local.get $n) (i32.sub (local.get $end) (i32.add (local.get $p) (i32.const 4))))
      (then (return (i32.const 0))))
    (i32.add (i32.add (local.get $p) (i32.const 4)) (local.get $n)))

  (func $decide (param $action i32) (param $coalesce i32) (result i64)
    (i32.store8 (i32.const 16) (i32.const 0))
    (i32.store8 (i32.const 17) (local.get $action))
    (i32.store8 (i32.const 18) (local.get $coalesce))
    (i32.store8 (i32.const 19) (i32.const 0))
    (i64.const 0x1000000004)) ;; (16 << 32) | 4

  (func (export "agenthost_input_policy") (param $ptr i32) (param $len i32) (result i64)
    (local $end i32) (local $content i32) (local $hint i32) (local $hend i32)
    (local $hlen i32) (local $active i32)
    (local.set $end (i32.add (local.get $ptr) (local.get $len)))
    (if (i32.or (i32.lt_u (local.get $len) (i32.const 16))
                (i32.ne (i32.load8_u (local.get $ptr)) (i32.const 1)))
      (then (return (i64.const 0x2000000018)))) ;; (32 << 32) | 24
    (local.set $active (i32.and (i32.load8_u offset=1 (local.get $ptr)) (i32.const 1)))
    ;; thread id, content, hint
    (local.set $content (call $str (i32.add (local.get $ptr) (i32.const 16)) (local.get $end)))
    (if (i32.eqz (local.get $content)) (then (return (i64.const 0x2000000018))))
    (local.set $hint (call $str (local.get $content) (local.get $end)))
    (if (i32.eqz (local.get $hint)) (then (return (i64.const 0x2000000018))))
    (local.set $hend (call $str (local.get $hint) (local.get $end)))
    (if (i32.eqz (local.get $hend)) (then (return (i64.const 0x2000000018))))
    (local.set $hlen (i32.load (local.get $hint)))
    ;; 1. hint "stop" -> interrupt (bytes are read only once the length
    ;; says they are there)
    (if (i32.eq (local.get $hlen) (i32.const 4))
      (then
        (if (i32.eq (i32.load offset=4 (local.get $hint)) (i32.const 0x706f7473)) ;; "stop"
          (then (return (call $decide (i32.const 3) (i32.const 0)))))))
    ;; 2. hint "refine" with an active run -> inject
    (if (i32.and (local.get $active) (i32.eq (local.get $hlen) (i32.const 6)))
      (then
        (if (i32.and (i32.eq (i32.load offset=4 (local.get $hint)) (i32.const 0x69666572)) ;; "refi"
                     (i32.eq (i32.load16_u offset=8 (local.get $hint)) (i32.const 0x656e))) ;; "ne"
          (then (return (call $decide (i32.const 2) (i32.const 0)))))))
    ;; 3. empty content -> reject
    (if (i32.eqz (i32.load (local.get $content)))
      (then (return (call $decide (i32.const 4) (i32.const 0)))))
    ;; 4. queue, coalescing when a run is queued
    (call $decide (i32.const 1) (i32.ne (i32.load offset=8 (local.get $ptr)) (i32.const 0))))

  ;; agenthost_tool_policy: deny "shell_exec", ask for a name containing
  ;; "delete", allow the rest.
  (func (export "agenthost_tool_policy") (param $ptr i32) (param $len i32) (result i64)
    (local $name i32) (local $n i32) (local $i i32)
    (if (i32.or (i32.lt_u (local.get $len) (i32.const 8))
                (i32.ne (i32.load8_u (local.get $ptr)) (i32.const 1)))
      (then (return (i64.const 0x2000000018)))) ;; (32 << 32) | 24
    ;; the tool name is the first string, after the 8-byte header
    (if (i32.eqz (call $str (i32.add (local.get $ptr) (i32.const 8))
                            (i32.add (local.get $ptr) (local.get $len))))
      (then (return (i64.const 0x2000000018))))
    (local.set $n (i32.load offset=8 (local.get $ptr)))
    (local.set $name (i32.add (local.get $ptr) (i32.const 12)))
    ;; "shell_exec": 8 bytes and 2
    (if (i32.eq (local.get $n) (i32.const 10))
      (then
        (if (i32.and (i64.eq (i64.load (local.get $name)) (i64.const 0x78655f6c6c656873)) ;; "shell_ex"
                     (i32.eq (i32.load16_u offset=8 (local.get $name)) (i32.const 0x6365))) ;; "ec"
          (then (return (i64.const 0xd40000001d)))))) ;; (212 << 32) | 29
    ;; "delete" anywhere: "dele" then "te" at every position that leaves room
    (if (i32.ge_u (local.get $n) (i32.const 6))
      (then
        (loop $scan
          (if (i32.and (i32.eq (i32.load (i32.add (local.get $name) (local.get $i))) (i32.const 0x656c6564)) ;; "dele"
                       (i32.eq (i32.load16_u offset=4 (i32.add (local.get $name) (local.get $i))) (i32.const 0x6574))) ;; "te"
            (then (return (i64.const 0x1000000001a)))) ;; (256 << 32) | 26
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $scan (i32.le_u (local.get $i) (i32.sub (local.get $n) (i32.const 6)))))))
    (i64.const 0xd000000004)) ;; (208 << 32) | 4
)
