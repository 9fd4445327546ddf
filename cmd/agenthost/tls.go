package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// certReloader serves the certificate of a cert and key file pair and
// loads it again on reload (SIGHUP) or when either file's modification
// time changed (looked at, at most once a second, at a handshake). A pair
// that fails to load is logged and the previous certificate kept.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // the files' modification times when loaded
	checked time.Time
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// stamps returns the files' modification times.
func (r *certReloader) stamps() string {
	var b strings.Builder
	for _, f := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d/%d;", fi.ModTime().UnixNano(), fi.Size())
		}
	}
	return b.String()
}

// reload loads the pair now.
func (r *certReloader) reload() error {
	stamp := r.stamps()
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls_cert %s, tls_key %s: %w", r.certFile, r.keyFile, err)
	}
	if c.Leaf == nil && len(c.Certificate) > 0 {
		c.Leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cert, r.stamp, r.checked = &c, stamp, time.Now()
	if c.Leaf != nil {
		r.log.Info("TLS certificate loaded", "cert", r.certFile, "subject", c.Leaf.Subject.String(), "not_after", c.Leaf.NotAfter)
	}
	return nil
}

// reloadLogged reloads, logging a failure (the previous certificate stays).
func (r *certReloader) reloadLogged() {
	if err := r.reload(); err != nil {
		r.log.Error("reloading the TLS certificate failed; serving the previous one", "err", err)
	}
}

// GetCertificate is tls.Config's.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	changed := false
	if time.Since(r.checked) >= time.Second {
		r.checked = time.Now()
		changed = r.stamps() != r.stamp
	}
	r.mu.Unlock()
	if changed {
		r.reloadLogged()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cert == nil {
		return nil, errors.New("no TLS certificate")
	}
	return r.cert, nil
}

// tlsConfig is the server's TLS configuration: TLS 1.2 at least, the
// certificate from r.
func (r *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}

// readTokenFile reads a bearer token from a file: its content, surrounding
// white space removed. A file others may read is warned about.
func readTokenFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("token_file: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token_file %s is empty", path)
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("token_file %s: the token holds white space (one line expected)", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		slog.Warn("token_file can be read by other users; chmod 600 it", "file", path, "mode", fi.Mode().Perm().String())
	}
	return tok, nil
}
