package schemaregistry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// Config says how to reach a schema registry. Only URLs is required.
type Config struct {
	// URLs (required) are the registry's base URLs, e.g.
	// "https://registry.example:8081"; a URL without a scheme gets
	// "http://". A request that cannot connect is retried on the next URL.
	URLs []string
	// Username and Password, when Username is set, are sent as HTTP basic
	// auth on every request (Confluent Cloud: the API key and secret).
	// Default: none.
	Username, Password string
	// BearerToken, when set, is sent as "Authorization: Bearer <token>" on
	// every request. Set it or Username, not both. Default: none.
	BearerToken string
	// TLS, when not nil, is the TLS configuration of https URLs (a private
	// CA in RootCAs, a client certificate for mTLS). Default nil: the
	// system's roots.
	TLS *tls.Config
	// Timeout bounds each registry request. Default 5s.
	Timeout time.Duration
}

// Client is a connection to a schema registry with a cache of the schemas
// it has fetched by id. It is safe for concurrent use, and meant to be
// shared by every serde of an application.
type Client struct {
	sr *sr.Client

	mu struct {
		sync.Mutex
		byID map[int]sr.Schema
	}
}

// NewClient returns a client of the registry that cfg describes. It makes
// no request: a wrong URL or credentials show in the first serde
// constructor (Avro, JSONSchema), which calls the registry.
func NewClient(cfg Config) (*Client, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("schemaregistry: Config.URLs is required")
	}
	if cfg.Username != "" && cfg.BearerToken != "" {
		return nil, errors.New("schemaregistry: set Config.Username or Config.BearerToken, not both")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("schemaregistry: Config.Timeout %v is negative", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	opts := []sr.ClientOpt{
		sr.URLs(append([]string(nil), cfg.URLs...)...),
		sr.HTTPClient(&http.Client{Timeout: cfg.Timeout}),
		sr.UserAgent("kstate"),
	}
	if cfg.TLS != nil {
		opts = append(opts, sr.DialTLSConfig(cfg.TLS))
	}
	if cfg.Username != "" {
		opts = append(opts, sr.BasicAuth(cfg.Username, cfg.Password))
	}
	if cfg.BearerToken != "" {
		opts = append(opts, sr.BearerToken(cfg.BearerToken))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schemaregistry: %w", err)
	}
	c := &Client{sr: cl}
	c.mu.byID = make(map[int]sr.Schema)
	return c, nil
}

// idFor returns the id of schema (named name in errors) under subject: registered first when
// register is set, else looked up (ErrSchemaNotFound when absent).
func (c *Client) idFor(ctx context.Context, subject, name string, s sr.Schema, register bool) (int, error) {
	if register {
		id, err := c.sr.RegisterSchema(ctx, subject, s, -1, -1)
		if err != nil {
			return 0, classify("register a schema", subject, 0, err)
		}
		c.remember(id, s)
		return id, nil
	}
	ss, err := c.sr.LookupSchema(ctx, subject, s)
	if err != nil {
		e := classify("look up the serde's schema", subject, 0, err)
		if errors.Is(e, ErrSchemaNotFound) {
			e.Err = fmt.Errorf("%s schema %s is not registered under the subject, and AutoRegister is off: register it (your schema pipeline, or the registry's REST API), or set Options.AutoRegister", s.Type, name)
		}
		return 0, e
	}
	c.remember(ss.ID, s)
	return ss.ID, nil
}

func (c *Client) remember(id int, s sr.Schema) {
	c.mu.Lock()
	c.mu.byID[id] = s
	c.mu.Unlock()
}

// schemaByID returns the schema with the given id, from the cache or the
// registry.
func (c *Client) schemaByID(ctx context.Context, subject string, id int) (sr.Schema, error) {
	c.mu.Lock()
	s, ok := c.mu.byID[id]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := c.sr.SchemaByID(ctx, id)
	if err != nil {
		return sr.Schema{}, classify("get", subject, id, err)
	}
	if s.Type == 0 {
		s.Type = sr.TypeAvro
	}
	c.remember(id, s)
	return s, nil
}

// classify turns a registry call's error into an *Error of the right kind.
func classify(op, subject string, id int, err error) *Error {
	e := &Error{Op: op, Subject: subject, ID: id, Err: err}
	var re *sr.ResponseError
	switch {
	case errors.As(err, &re):
		e.Err = fmt.Errorf("%s %s: HTTP %d: %w", re.Method, re.URL, re.StatusCode, err)
		switch {
		case re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden:
			e.Kind = ErrUnauthorized
		case re.StatusCode == http.StatusNotFound:
			e.Kind = ErrSchemaNotFound
		case re.StatusCode == http.StatusConflict:
			e.Kind = ErrIncompatible
		case re.StatusCode >= 500:
			e.Kind = ErrUnavailable
		}
	default:
		// No HTTP answer: connection refused, DNS, TLS, timeout.
		e.Kind = ErrUnavailable
	}
	return e
}

// describe names a schema in an error: its first 80 bytes.
func describe(schema string) string {
	if len(schema) > 80 {
		return fmt.Sprintf("%.80q...", schema)
	}
	return fmt.Sprintf("%q", schema)
}
