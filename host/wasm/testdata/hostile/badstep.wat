;; badstep: a prepareStep that returns malformed JSON; a fixture for host/wasm tests (see testdata/hostile/build.sh).
(module
  (memory (export "memory") 1)
  ;; manifest JSON, after a status byte, at address 0
  (data (i32.const 0) "\00{\"name\":\"badstep\",\"hooks\":[\"prepareStep\"]}")
  ;; the prepareStep result at address 512
  (data (i32.const 512) "\00{\"toolChoice\":")
  (func (export "agenthost_abi_version") (result i32) (i32.const 1))
  (func (export "agenthost_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "agenthost_manifest") (result i64) (i64.const 43))
  (func (export "agenthost_prepare_step") (param i32 i32) (result i64)
    (i64.const 0x2000000000f))
)
