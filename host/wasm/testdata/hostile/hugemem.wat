;; hugemem: declares 4 GiB of initial memory; a hostile guest fixture for host/wasm tests (see testdata/hostile/build.sh).
(module
  (memory (export "memory") 65536)
  ;; manifest JSON, after a status byte, at address 0
  (data (i32.const 0) "\00{\"name\":\"hugemem\",\"version\":\"0\",\"hooks\":[\"inputPolicy\"],\"actions\":[\"queue\"]}")
  ;; a queue decision at address 512
  (data (i32.const 512) "\00\01\00\00")
  (func (export "agenthost_abi_version") (result i32) (i32.const 1))
  (func (export "agenthost_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "agenthost_manifest") (result i64) (i64.const 77))
  (func (export "agenthost_input_policy") (param i32 i32) (result i64)
    (i64.const 0x20000000004))
)
