package kstate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"
)

// Forwarding a live query to the key's owner (QueryHandler).

const (
	// headerForwardedBy marks a forwarded live query with the forwarding
	// instance (Options.InstanceID): its receiver never forwards it again.
	headerForwardedBy = "Kstate-Forwarded-By"
	// headerAnsweredBy names the instance (Options.InstanceID) that
	// answered a live query.
	headerAnsweredBy = "Kstate-Answered-By"
)

// forwardTimeout bounds a forwarded query's round trip to the owner (a
// variable for tests).
var forwardTimeout = 10 * time.Second

// forwardClient sends forwarded queries; it follows no redirect (the
// caller's credentials go to the advertised URL only).
var forwardClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// notForwarded says why a query for a key owned by o is answered 421
// instead of being forwarded; "" to forward it.
func (a *App[K, I, O]) notForwarded(r *http.Request, o KeyOwner) string {
	switch {
	case !o.Assigned:
		return fmt.Sprintf("no member of the group owns partition %d now (a rebalance, or its owner stopped "+
			"without leaving the group: until its session times out)", o.Partition)
	case o.Local || (o.Process != "" && o.Process == a.cfg.InstanceID):
		return fmt.Sprintf("partition %d is this instance's but not restored yet", o.Partition)
	case r.Header.Get(headerForwardedBy) != "":
		return fmt.Sprintf("not forwarded again: this query was forwarded by %s, whose group view is older "+
			"or newer than this instance's (a rebalance in between); ask again", r.Header.Get(headerForwardedBy))
	case o.URL == "":
		return fmt.Sprintf("the owner %s advertises no URL (its Options.Group.AdvertisedURL is empty, "+
			"or the group's leader runs a release that sends none): ask it yourself", o.InstanceID)
	case r.URL.Query().Get("forward") == "0":
		return fmt.Sprintf("not forwarded (forward=0): ask the owner %s at %s", o.InstanceID, o.URL)
	}
	if msg := checkAdvertisedURL(o.URL); msg != "" {
		return fmt.Sprintf("not forwarded: the owner %s advertises an invalid URL: %s", o.InstanceID, msg)
	}
	return ""
}

// forward sends r to the owner o and answers with its response.
func (a *App[K, I, O]) forward(w http.ResponseWriter, r *http.Request, o KeyOwner) {
	fail := func(code int, err error) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set(headerAnsweredBy, a.cfg.InstanceID)
		writeJSON(w, code, queryFailure{Error: fmt.Sprintf("kstate: forwarding the live query to the key's owner %s at %s: %v",
			o.InstanceID, o.URL, err), Owner: &o})
	}
	target, err := forwardTarget(o.URL, r)
	if err != nil {
		fail(http.StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, target, nil)
	if err != nil {
		fail(http.StatusBadGateway, err)
		return
	}
	req.Header = endToEnd(r.Header)
	req.Header.Set(headerForwardedBy, a.cfg.InstanceID)
	resp, err := forwardClient.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
			fail(http.StatusGatewayTimeout, fmt.Errorf("no answer within %v", forwardTimeout))
			return
		}
		fail(http.StatusBadGateway, err)
		return
	}
	defer resp.Body.Close()
	h := w.Header()
	for k, vs := range endToEnd(resp.Header) {
		h[k] = vs
	}
	if h.Get(headerAnsweredBy) == "" { // an owner of an older release
		h.Set(headerAnsweredBy, o.InstanceID)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// forwardTarget is base (an advertised URL, no path) with r's own path and
// query, as the caller sent them (before any http.StripPrefix).
func forwardTarget(base string, r *http.Request) (string, error) {
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return "", fmt.Errorf("the request URI %q: %w", uri, err)
	}
	t := strings.TrimSuffix(base, "/") + u.EscapedPath()
	if u.RawQuery != "" {
		t += "?" + u.RawQuery
	}
	return t, nil
}

// hopByHop are the headers of one connection (RFC 9110, 7.6.1), not
// forwarded.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// endToEnd returns a copy of h without its hop-by-hop headers (also those
// its Connection header names).
func endToEnd(h http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		out = http.Header{}
	}
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				out.Del(name)
			}
		}
	}
	for _, k := range hopByHop {
		out.Del(k)
	}
	return out
}
