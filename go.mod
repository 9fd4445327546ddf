module github.com/agenthost/agenthost

go 1.26

require (
	github.com/google/uuid v1.6.0
	github.com/tetratelabs/wazero v1.12.0
)

require golang.org/x/sys v0.44.0 // indirect
