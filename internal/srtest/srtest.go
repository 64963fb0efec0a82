// Package srtest is a stand-in for a Confluent-compatible schema registry,
// for tests and examples: an httptest server that implements only the REST calls that
// package serde/schemaregistry makes, over an in-memory store. It is not a
// registry: it checks no compatibility, has no modes, contexts, references,
// deletes or normalization, and gives ids in registration order. Tests that
// need a real registry's behaviour run one through testcontainers
// (integration/schemaregistry_container_test.go).
//
// Calls served:
//
//	POST /subjects/{subject}/versions  register a schema under a subject -> {"id"}
//	POST /subjects/{subject}           look a schema up in a subject -> {"subject","version","id","schema"}
//	GET  /schemas/ids/{id}             a schema by id -> {"schema","schemaType"}
//
// With Username/Password or Token set, every call must carry that basic
// auth or bearer token, or gets 401 like a registry does.
package srtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// Options configure a Server. The zero value serves plain HTTP without
// authentication.
type Options struct {
	// Username and Password, when Username is set, are the basic auth
	// every request must carry.
	Username, Password string
	// Token, when set, is the bearer token every request must carry
	// (accepted in addition to the basic auth above).
	Token string
	// TLS serves HTTPS with httptest's certificate (Server.Client's
	// transport trusts it; Server.TLSConfig gives a tls.Config that does).
	TLS bool
}

// Server is a running stand-in registry.
type Server struct {
	URL  string
	srv  *httptest.Server
	opts Options

	requests atomic.Int64
	down     atomic.Bool

	mu struct {
		sync.Mutex
		schemas  []stored         // by id-1
		subjects map[string][]int // subject -> ids by version-1
		byText   map[stored]int   // (type, text) -> id
	}
}

type stored struct{ text, typ string }

// Start starts a stand-in registry, closed at the end of the test.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := New(opts)
	t.Cleanup(s.Close)
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// New starts a stand-in registry outside a test (an Example function); the
// caller closes it.
func New(opts Options) *Server {
	s := &Server{opts: opts}
	s.mu.subjects = make(map[string][]int)
	s.mu.byText = make(map[stored]int)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /subjects/{subject}/versions", s.register)
	mux.HandleFunc("POST /subjects/{subject}", s.lookup)
	mux.HandleFunc("GET /schemas/ids/{id}", s.byID)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if s.down.Load() {
			writeError(w, http.StatusServiceUnavailable, 50003, "stand-in registry set down")
			return
		}
		if !s.authorized(r) {
			writeError(w, http.StatusUnauthorized, 401, "Unauthorized")
			return
		}
		mux.ServeHTTP(w, r)
	})
	if opts.TLS {
		s.srv = httptest.NewTLSServer(h)
	} else {
		s.srv = httptest.NewServer(h)
	}
	s.URL = s.srv.URL
	return s
}

// HTTPServer is the underlying httptest server (for its TLS certificate
// and Client).
func (s *Server) HTTPServer() *httptest.Server { return s.srv }

// Requests is the number of HTTP requests served so far, rejected ones
// included.
func (s *Server) Requests() int64 { return s.requests.Load() }

// SetDown makes every request fail with HTTP 503 (down) or be served again.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// Register registers schema (of type typ: "AVRO", "JSON" or "PROTOBUF")
// under subject, as a producer's CI would, and returns its id.
func (s *Server) Register(subject, schema, typ string) int {
	id, _ := s.add(subject, stored{schema, typ})
	return id
}

// Schema returns the text and type of the schema with the given id.
func (s *Server) Schema(id int) (text, typ string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id < 1 || id > len(s.mu.schemas) {
		return "", "", false
	}
	st := s.mu.schemas[id-1]
	return st.text, st.typ, true
}

func (s *Server) authorized(r *http.Request) bool {
	if s.opts.Username == "" && s.opts.Token == "" {
		return true
	}
	if s.opts.Token != "" && r.Header.Get("Authorization") == "Bearer "+s.opts.Token {
		return true
	}
	u, p, ok := r.BasicAuth()
	return s.opts.Username != "" && ok && u == s.opts.Username && p == s.opts.Password
}

// add registers st under subject: the existing id and version when the
// subject already has it, else a new version (and a new id unless another
// subject has the same schema, as Confluent's registry does).
func (s *Server) add(subject string, st stored) (id, version int) {
	if st.typ == "" {
		st.typ = "AVRO"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.mu.byText[st]
	if !ok {
		s.mu.schemas = append(s.mu.schemas, st)
		id = len(s.mu.schemas)
		s.mu.byText[st] = id
	}
	for v, have := range s.mu.subjects[subject] {
		if have == id {
			return id, v + 1
		}
	}
	s.mu.subjects[subject] = append(s.mu.subjects[subject], id)
	return id, len(s.mu.subjects[subject])
}

type schemaBody struct {
	Schema     string `json:"schema"`
	SchemaType string `json:"schemaType,omitempty"`
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var b schemaBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Schema == "" {
		writeError(w, http.StatusUnprocessableEntity, 42201, "Invalid schema")
		return
	}
	id, _ := s.add(r.PathValue("subject"), stored{b.Schema, b.SchemaType})
	writeJSON(w, map[string]int{"id": id})
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) {
	var b schemaBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		writeError(w, http.StatusUnprocessableEntity, 42201, "Invalid schema")
		return
	}
	if b.SchemaType == "" {
		b.SchemaType = "AVRO"
	}
	subject := r.PathValue("subject")
	s.mu.Lock()
	ids, hasSubject := s.mu.subjects[subject]
	id := s.mu.byText[stored{b.Schema, b.SchemaType}]
	s.mu.Unlock()
	if !hasSubject {
		writeError(w, http.StatusNotFound, 40401, fmt.Sprintf("Subject '%s' not found.", subject))
		return
	}
	for v, have := range ids {
		if have == id {
			writeJSON(w, map[string]any{"subject": subject, "version": v + 1, "id": id, "schema": b.Schema, "schemaType": b.SchemaType})
			return
		}
	}
	writeError(w, http.StatusNotFound, 40403, "Schema not found")
}

func (s *Server) byID(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(r.PathValue("id"))
	text, typ, ok := s.Schema(id)
	if err != nil || !ok {
		writeError(w, http.StatusNotFound, 40403, fmt.Sprintf("Schema %s not found", r.PathValue("id")))
		return
	}
	b := schemaBody{Schema: text}
	if typ != "AVRO" {
		b.SchemaType = typ // a registry leaves out the default type
	}
	writeJSON(w, b)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error_code": code, "message": msg})
}
