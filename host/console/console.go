// Package console serves the web console at /ui/: a page, embedded in the
// binary, that reads the HTTP API (docs/http-api.md) from the browser and
// shows threads, runs and absorptions as a picture, live. It is plain
// JavaScript with no build step (docs/adr/0134), so `go build` alone gives a
// working console, and it fetches nothing from outside the server.
//
// The console's files are public and hold no data; every call the page makes
// goes to the API with the token the user typed, which the page keeps for
// the tab only (sessionStorage). docs/console.md describes the pages.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

//go:embed assets
var assets embed.FS

// securityHeaders are sent with every file: the page runs only its own
// scripts and styles and talks only to its own origin, so a thread's content
// can never run as code, and nothing frames it.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
	// Files change with the binary: always revalidate.
	"Cache-Control": "no-cache",
}

// Handler serves the console's files under Prefix.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree always has assets/
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		files.ServeHTTP(w, r)
	})
}

// Mount returns a handler that serves the console under Prefix (and
// redirects the bare /ui to it) and passes every other request to api.
func Mount(api http.Handler) http.Handler {
	ui := Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, Prefix) || r.URL.Path == strings.TrimSuffix(Prefix, "/") {
			ui.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}
