package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestProductionConfig loads examples/production.yaml with the real
// loader and validation, as serve does: the token from the token file,
// TLS and the production settings as documented.
func TestProductionConfig(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The unit and the container point AGENTHOST_TOKEN_FILE at the token.
	env := func(k string) (string, bool) {
		if k == "AGENTHOST_TOKEN_FILE" {
			return tok, true
		}
		return "", false
	}
	cfg, err := loadConfig("../../examples/production.yaml", env, newFlagSet("serve", "", "", io.Discard), &Config{})
	if err != nil {
		t.Fatalf("examples/production.yaml: %v", err)
	}
	if cfg.Token != "0123456789abcdef" || cfg.TLSCert == "" || cfg.TLSKey == "" {
		t.Errorf("token %q, tls %q %q: want the token file's token and TLS", cfg.Token, cfg.TLSCert, cfg.TLSKey)
	}
	if cfg.AutoCertify || cfg.LogFormat != "json" || !cfg.AccessLog || cfg.Store != "badgerstore" || cfg.Model != "openai" {
		t.Errorf("production settings: %+v", cfg)
	}
	if cfg.ShutdownTimeout != 30*time.Second || cfg.DriverStopTimeout != 15*time.Second {
		t.Errorf("shutdown %v, driver stop %v: packaging/agenthost.service's TimeoutStopSec counts on 30s and 15s", cfg.ShutdownTimeout, cfg.DriverStopTimeout)
	}
}
