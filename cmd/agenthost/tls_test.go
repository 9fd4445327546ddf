package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate for 127.0.0.1 named cn, and
// its key, to certFile and keyFile; it returns the certificate's PEM.
func writeCert(t *testing.T, cn, certFile, keyFile string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPEM
}

// TestTLSServedAndReloaded serves HTTPS from a generated certificate; the
// client trusts it through --ca-file and sends the token of --token-file.
// A new certificate is served after a reload (SIGHUP's path) and after the
// files changed.
func TestTLSServedAndReloaded(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca1 := writeCert(t, "first", certFile, keyFile)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := newCertReloader(certFile, keyFile, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{TLSConfig: r.tlsConfig(), Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, `{"status":"ok"}`)
	})}
	go srv.ServeTLS(ln, "", "")
	defer srv.Close()
	url := "https://" + ln.Addr().String()

	served := func() string {
		t.Helper()
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	client := func(ca []byte) error {
		t.Helper()
		caFile, tokFile := filepath.Join(t.TempDir(), "ca.pem"), filepath.Join(t.TempDir(), "token")
		os.WriteFile(caFile, ca, 0o600)
		os.WriteFile(tokFile, []byte("s3cret\n"), 0o600)
		c := &clientFlags{server: url, caFile: caFile, tokenFile: tokFile}
		var out map[string]string
		_, err := c.do(context.Background(), "GET", "/healthz", nil, nil, &out)
		if err == nil && out["status"] != "ok" {
			t.Fatalf("answer %v", out)
		}
		return err
	}
	if err := client(ca1); err != nil {
		t.Fatalf("a client trusting the certificate: %v", err)
	}
	if got := served(); got != "first" {
		t.Fatalf("served %q", got)
	}
	if err := (&clientFlags{server: url}).healthz(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client not trusting it: %v, want a certificate error", err)
	}

	// SIGHUP's path: reload.
	ca2 := writeCert(t, "second", certFile, keyFile)
	r.reloadLogged()
	if got := served(); got != "second" {
		t.Fatalf("after the reload: served %q", got)
	}
	if err := client(ca2); err != nil {
		t.Fatalf("a client trusting the new certificate: %v", err)
	}
	if err := client(ca1); err == nil {
		t.Fatalf("a client trusting only the old certificate was served")
	}

	// On change: the files are looked at, at most once a second, at a
	// handshake.
	writeCert(t, "third", certFile, keyFile)
	later := time.Now().Add(time.Minute)
	os.Chtimes(certFile, later, later)
	r.mu.Lock()
	r.checked = time.Time{}
	r.mu.Unlock()
	if got := served(); got != "third" {
		t.Fatalf("after the files changed: served %q", got)
	}

	// A broken pair keeps the previous certificate.
	os.WriteFile(certFile, []byte("garbage"), 0o600)
	r.reloadLogged()
	if got := served(); got != "third" {
		t.Fatalf("after a failed reload: served %q", got)
	}
}

func (c *clientFlags) healthz() error {
	_, err := c.do(context.Background(), "GET", "/healthz", nil, nil, nil)
	return err
}

// TestTokenFile: the token is read from the file; both token and
// token_file, an empty file, or a lone tls_cert are refused.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("  abc123\n"), 0o600)
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	fs := newFlagSet("serve", "", "", io.Discard)
	cfg, err := loadConfig("", env(map[string]string{"AGENTHOST_TOKEN_FILE": tok}), fs, &Config{})
	if err != nil || cfg.Token != "abc123" {
		t.Fatalf("token %q, err %v", cfg.Token, err)
	}
	for name, m := range map[string]map[string]string{
		"both":      {"AGENTHOST_TOKEN_FILE": tok, "AGENTHOST_TOKEN": "x"},
		"empty":     {"AGENTHOST_TOKEN_FILE": writeFile(t, dir, "empty", "\n")},
		"missing":   {"AGENTHOST_TOKEN_FILE": filepath.Join(dir, "nope")},
		"lone cert": {"AGENTHOST_TLS_CERT": tok},
	} {
		if _, err := loadConfig("", env(m), newFlagSet("serve", "", "", io.Discard), &Config{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
