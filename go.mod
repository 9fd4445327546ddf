module github.com/agenthost/agenthost

go 1.26

require github.com/google/uuid v1.6.0

require (
	github.com/cockroachdb/datadriven v1.0.3 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/rogpeppe/go-internal v1.16.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
