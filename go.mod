module github.com/agenthost/agenthost

go 1.26

require github.com/google/uuid v1.6.0
