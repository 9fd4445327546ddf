;; tooltricks: a toolPolicy guest that misbehaves by the first letter of the tool name; a hostile guest fixture for host/wasm tests (see testdata/hostile/build.sh).
;; l: loops forever; t: traps; b: unknown decision code; a: asks for 17 approvals; e: status 1 with a message;
;; o: a result outside memory; n: asks with a 6000-byte prompt full of control characters;
;; d: denies with an empty message; q: asks with an empty prompt; anything else (and no name): allows.
(module
  (memory (export "memory") 1)
  ;; manifest JSON, after a status byte, at address 0 (59 bytes)
  (data (i32.const 0) "\00{\"name\":\"tooltricks\",\"version\":\"0\",\"hooks\":[\"toolPolicy\"]}")
  ;; decisions at 256: allow, bad code, 17 approvals, deny, ask
  (data (i32.const 256) "\00\01\00\00")
  (data (i32.const 260) "\00\09\00\00")
  (data (i32.const 264) "\00\03\11\00")
  (data (i32.const 268) "\00\02\00\00")
  (data (i32.const 272) "\00\03\00\00")
  ;; an error result at 288
  (data (i32.const 288) "\01bad tool config")
  ;; an ask with a prompt at 4096: escape, newline, then zero bytes to 10096
  (data (i32.const 4096) "\00\03\00\00\1b[31mred\nline")
  (func (export "agenthost_abi_version") (result i32) (i32.const 1))
  (func (export "agenthost_alloc") (param i32) (result i32) (i32.const 16384))
  (func (export "agenthost_manifest") (result i64) (i64.const 59))
  (func (export "agenthost_tool_policy") (param $p i32) (param $n i32) (result i64)
    (local $c i32)
    ;; no name: allow
    (if (i32.eqz (i32.load (i32.add (local.get $p) (i32.const 8))))
      (then (return (i64.const 0x10000000004))))
    ;; the first byte of the name is at p + 12
    (local.set $c (i32.load8_u (i32.add (local.get $p) (i32.const 12))))
    (if (i32.eq (local.get $c) (i32.const 108)) (then (loop $forever (br $forever))))
    (if (i32.eq (local.get $c) (i32.const 116)) (then (unreachable)))
    (if (i32.eq (local.get $c) (i32.const 98)) (then (return (i64.const 0x10400000004))))
    (if (i32.eq (local.get $c) (i32.const 97)) (then (return (i64.const 0x10800000004))))
    (if (i32.eq (local.get $c) (i32.const 101)) (then (return (i64.const 0x12000000010))))
    (if (i32.eq (local.get $c) (i32.const 111)) (then (return (i64.const 0xfff0000000000010))))
    (if (i32.eq (local.get $c) (i32.const 110)) (then (return (i64.const 0x100000001770))))
    (if (i32.eq (local.get $c) (i32.const 100)) (then (return (i64.const 0x10c00000004))))
    (if (i32.eq (local.get $c) (i32.const 113)) (then (return (i64.const 0x11000000004))))
    (i64.const 0x10000000004))
)
