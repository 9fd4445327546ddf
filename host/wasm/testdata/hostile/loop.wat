;; loop: infinite loop in inputPolicy; a hostile guest fixture for host/wasm tests (see testdata/hostile/build.sh).
(module
  (memory (export "memory") 1)
  ;; manifest JSON, after a status byte, at address 0
  (data (i32.const 0) "\00{\"name\":\"loop\",\"version\":\"0\",\"hooks\":[\"inputPolicy\"],\"actions\":[\"queue\"]}")
  ;; a queue decision at address 512
  (data (i32.const 512) "\00\01\00\00")
  (func (export "agenthost_abi_version") (result i32) (i32.const 1))
  (func (export "agenthost_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "agenthost_manifest") (result i64) (i64.const 74))
  (func (export "agenthost_input_policy") (param i32 i32) (result i64)
    (loop $forever (br $forever))
    (unreachable))
)
