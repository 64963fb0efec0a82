package main

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/internal/sandbox"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// The README shows counter.go, main.go, counter_test.go and faults_test.go
// verbatim, so
// what it shows compiles (and the test passes); and the processor is
// short, as the README promises.
func TestREADMEShowsTheseFiles(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"counter.go", "main.go", "counter_test.go", "faults_test.go"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(readme), "```go\n"+string(src)+"```\n") {
			t.Errorf("README.md does not show examples/readme/%s verbatim in a ```go block; copy it over", f)
		}
		if n := strings.Count(string(src), "\n"); f == "counter.go" && n >= 40 {
			t.Errorf("counter.go has %d lines; the README promises under 40", n)
		}
	}
}

// The README's counter counts: a a a b b gives a=3 b=2.
func TestREADMECounterCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := sandbox.Open(nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if err := env.CreateTopics(ctx, 2, "words", "counts"); err != nil {
		t.Fatal(err)
	}
	app, err := kstate.New(kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), "words"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &Counter{} },
		Output: kstate.Output[string, string]{
			Topic: "counts",
			Serde: serde.String(),
		},
	}, kstate.Options{
		ApplicationID: "wordcount",
		Kafka: kstate.KafkaOptions{
			Brokers: env.Brokers,
		},
		State: kstate.StateOptions{
			Dir: env.StateDir,
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 50 * time.Millisecond,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	running, stop := sandbox.Start(ctx, app)
	defer stop()
	var rows []sandbox.Row[string, string]
	for _, w := range strings.Fields("a a a b b") {
		rows = append(rows, sandbox.KV(w, "x"))
	}
	if err := sandbox.Produce(running, env, "words", serde.String(), serde.String(), rows...); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.Until(running, "5 rows counted", func() bool { return app.Metrics().Total.RowsIn >= 5 }); err != nil {
		t.Fatal(err)
	}
	out, err := sandbox.Read(running, env, "counts", serde.String(), serde.String())
	if err != nil {
		t.Fatal(err)
	}
	latest := map[string]string{}
	for _, r := range out {
		latest[r.Key] = r.Value
	}
	if latest["a"] != "3" || latest["b"] != "2" || len(latest) != 2 {
		t.Fatalf("latest counts %v, want a=3 b=2 (all outputs: %v)", latest, out)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// The README's configuration tables list every field of kstate.Topology
// and kstate.Options, nested groups by their path (Output.Topic,
// Kafka.Brokers), in order, mark the required ones, and quote each default
// from the field's doc comment (which New implements), so the tables
// cannot drift silently.
func TestREADMEConfigTable(t *testing.T) {
	type field struct{ name, doc string }
	structs := map[string]*ast.StructType{}
	for _, file := range []string{"../../topology.go", "../../options.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = st
				}
			}
			return true
		})
	}
	var fields []field
	var walk func(prefix string, st *ast.StructType)
	walk = func(prefix string, st *ast.StructType) {
		for _, fl := range st.Fields.List {
			typ := fl.Type
			if ix, ok := typ.(*ast.IndexListExpr); ok {
				typ = ix.X
			}
			for _, name := range fl.Names {
				if id, ok := typ.(*ast.Ident); ok && structs[id.Name] != nil {
					walk(prefix+name.Name+".", structs[id.Name]) // a group: its fields are the rows
					continue
				}
				fields = append(fields, field{prefix + name.Name, strings.Join(strings.Fields(fl.Doc.Text()), " ")})
			}
		}
	}
	for _, top := range []string{"Topology", "Options"} {
		if structs[top] == nil {
			t.Fatalf("no type %s found in topology.go or options.go", top)
		}
		walk("", structs[top])
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Configuration\n")
	if !ok {
		t.Fatal("README.md has no ## Configuration section")
	}
	section, _, _ = strings.Cut(section, "\n## ") // the ### tables stay in
	rows := map[string]string{}                   // field → default column
	var order []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		rows[name] = strings.Trim(strings.TrimSpace(cells[2]), "`")
		order = append(order, name)
	}
	var names []string
	for _, fl := range fields {
		names = append(names, fl.name)
	}
	if !slices.Equal(order, names) {
		t.Fatalf("README configuration tables list\n%v\ntopology.go and options.go declare\n%v", order, names)
	}
	for _, fl := range fields {
		def := rows[fl.name]
		required := strings.Contains(fl.doc, "(required)")
		switch {
		case required != (def == "required"):
			t.Errorf("%s: README says %q, doc comment says required=%v: %s", fl.name, def, required, fl.doc)
		case required:
		case !strings.Contains(fl.doc, "Default"):
			t.Errorf("%s: the doc comment states no default: %s", fl.name, fl.doc)
		default:
			_, after, _ := strings.Cut(fl.doc, "Default")
			if !strings.Contains(after, def) {
				t.Errorf("%s: README default %q is not what the doc comment says: %s", fl.name, def, fl.doc)
			}
		}
	}
}
