;; toolbadsig: exports agenthost_tool_policy with the wrong signature; a hostile guest fixture for host/wasm tests (see testdata/hostile/build.sh).
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "\00{\"name\":\"toolbadsig\",\"hooks\":[\"toolPolicy\"]}")
  (func (export "agenthost_abi_version") (result i32) (i32.const 1))
  (func (export "agenthost_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "agenthost_manifest") (result i64) (i64.const 45))
  (func (export "agenthost_tool_policy") (param i32 i32) (result i32) (i32.const 0))
)
