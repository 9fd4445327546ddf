;; manifestloop: loops forever in agenthost_manifest; a fixture for host/wasm tests (see testdata/hostile/build.sh).
(module
  (memory (export "memory") 1)
  (func (export "agenthost_abi_version") (result i32) (i32.const 1))
  (func (export "agenthost_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "agenthost_manifest") (result i64)
    (loop $forever (br $forever))
    (i64.const 0))
  (func (export "agenthost_input_policy") (param i32 i32) (result i64) (i64.const 0))
)
