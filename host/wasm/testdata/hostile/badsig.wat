;; badsig: agenthost_abi_version returns an i64; a fixture for host/wasm tests (see testdata/hostile/build.sh).
(module
  (memory (export "memory") 1)
  (func (export "agenthost_abi_version") (result i64) (i64.const 1))
  (func (export "agenthost_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "agenthost_manifest") (result i64) (i64.const 0))
)
