package kstate

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"net/http"
)

// The status page: statuspage/index.html with its stylesheet and script,
// plain files edited as they are (no build step). They are served as one
// response, the stylesheet and the script inlined, so the page needs no
// further route and works under any mount prefix (it fetches "status"
// relative to its own URL).
//
//go:embed statuspage
var statusPageFiles embed.FS

// statusPage returns the handler of GET / of App.Handler: the page, with a
// Content-Security-Policy that allows its own inline script and stylesheet
// (by hash), requests to its own origin, and nothing else.
func statusPage() http.Handler {
	body, csp, err := buildStatusPage()
	if err != nil { // the embedded files are part of the build: a bug
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "kstate: status page: "+err.Error(), http.StatusInternalServerError)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", csp)
		_, _ = w.Write(body)
	})
}

// buildStatusPage inlines page.css and page.js into index.html.
func buildStatusPage() (body []byte, csp string, err error) {
	read := func(name string) []byte {
		b, rerr := statusPageFiles.ReadFile("statuspage/" + name)
		if rerr != nil && err == nil {
			err = rerr
		}
		return b
	}
	html, css, js := read("index.html"), read("page.css"), read("page.js")
	if err != nil {
		return nil, "", err
	}
	for _, r := range []struct {
		tag, open, content, close []byte
	}{
		{[]byte(`<link rel="stylesheet" href="page.css">`), []byte("<style>"), css, []byte("</style>")},
		{[]byte(`<script src="page.js"></script>`), []byte("<script>"), js, []byte("</script>")},
	} {
		if bytes.Count(html, r.tag) != 1 {
			return nil, "", fmt.Errorf("index.html must contain %s once", r.tag)
		}
		if bytes.Contains(r.content, r.close) {
			return nil, "", fmt.Errorf("an inlined file contains %s", r.close)
		}
		inline := bytes.Join([][]byte{r.open, r.content, r.close}, nil)
		html = bytes.Replace(html, r.tag, inline, 1)
	}
	csp = fmt.Sprintf("default-src 'none'; script-src '%s'; style-src '%s'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'",
		cspHash(js), cspHash(css))
	return html, csp, nil
}

// cspHash is the CSP source expression of an inline element's content.
func cspHash(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}
