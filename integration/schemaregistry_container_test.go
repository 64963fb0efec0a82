package integration

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/kstate/kstate/serde/schemaregistry"
)

// registryImage is a real schema registry that needs no Kafka: Apicurio
// Registry with its in-memory storage, serving Confluent's REST API under
// /apis/ccompat/v7. KSTATE_SCHEMA_REGISTRY_IMAGE overrides it.
const registryImage = "apicurio/apicurio-registry:3.3.0"

// realRegistry returns the base URL of a real schema registry:
// KSTATE_SCHEMA_REGISTRY_URL (one you run, e.g. Confluent's on :8081), or
// a registry container started with testcontainers when a Docker engine is
// healthy. Without either the test is skipped with a loud message: no
// registry server can run here without Docker (docs/DEPENDENCIES-2.md).
func realRegistry(t *testing.T) string {
	t.Helper()
	if u := os.Getenv("KSTATE_SCHEMA_REGISTRY_URL"); u != "" {
		t.Logf("schema registry: KSTATE_SCHEMA_REGISTRY_URL=%s", u)
		return u
	}
	skip := func(why string, err error) string {
		t.Skipf("SKIPPING REAL-SCHEMA-REGISTRY TEST: %s: %v (set KSTATE_SCHEMA_REGISTRY_URL, or run a Docker engine; the stand-in registry tests cover the serde meanwhile)", why, err)
		return ""
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return skip("no docker client on PATH", err)
	}
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return skip("no Docker provider", err)
	}
	hctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = p.Health(hctx)
	cancel()
	_ = p.Close()
	if err != nil {
		return skip("Docker engine not healthy", err)
	}
	image := registryImage
	if img := os.Getenv("KSTATE_SCHEMA_REGISTRY_IMAGE"); img != "" {
		image = img
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := testcontainers.Run(ctx, image,
		testcontainers.WithExposedPorts("8080/tcp"),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/apis/ccompat/v7/subjects").WithPort("8080/tcp").WithStartupTimeout(3*time.Minute)))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("start %s: %v", image, err)
	}
	endpoint, err := c.PortEndpoint(ctx, "8080/tcp", "http")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("schema registry: %s (testcontainers) at %s", image, endpoint)
	return endpoint + "/apis/ccompat/v7"
}

type regOrderV1 struct {
	ID   int32  `avro:"id"`
	Item string `avro:"item"`
}

type regOrderV2 struct {
	ID       int64  `avro:"id"`
	Item     string `avro:"item"`
	Currency string `avro:"currency"`
}

// The serdes against a real registry: registration and id assignment,
// lookup with AutoRegister off, a compatible evolution read across
// versions, an incompatible registration refused (ErrIncompatible), an
// unknown id (ErrSchemaNotFound), JSON Schema.
func TestSchemaRegistryReal(t *testing.T) {
	url := realRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := schemaregistry.NewClient(schemaregistry.Config{URLs: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	topic := "kstate-sr-" + time.Now().Format("150405.000000")
	const v1 = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"int"},{"name":"item","type":"string"}]}`
	const v2 = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"currency","type":"string","default":"EUR"}]}`
	const bad = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"int"},{"name":"sku","type":"string"}]}`

	if _, err := schemaregistry.Avro[regOrderV1](ctx, c, v1, schemaregistry.Options{Topic: topic}); !errors.Is(err, schemaregistry.ErrSchemaNotFound) {
		t.Fatalf("lookup before registration: %v, want ErrSchemaNotFound", err)
	}
	w1, err := schemaregistry.Avro[regOrderV1](ctx, c, v1, schemaregistry.Options{Topic: topic, AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	again, err := schemaregistry.Avro[regOrderV1](ctx, c, v1, schemaregistry.Options{Topic: topic})
	if err != nil || again.SchemaID() != w1.SchemaID() {
		t.Fatalf("lookup after registration: id %v, %v; want %d", again, err, w1.SchemaID())
	}
	r2, err := schemaregistry.Avro[regOrderV2](ctx, c, v2, schemaregistry.Options{Topic: topic, AutoRegister: true})
	if err != nil {
		t.Fatalf("register a backward-compatible v2: %v", err)
	}
	b, err := w1.Serialize(regOrderV1{ID: 7, Item: "tea"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r2.Deserialize(b); err != nil || got != (regOrderV2{ID: 7, Item: "tea", Currency: "EUR"}) {
		t.Fatalf("v1 read as v2: %+v, %v", got, err)
	}
	// Confluent's default level is BACKWARD, Apicurio has none: set it.
	setCompatibility(t, url, topic+"-value", "BACKWARD")
	if _, err := schemaregistry.Avro[regOrderV1](ctx, c, bad, schemaregistry.Options{Topic: topic, AutoRegister: true}); !errors.Is(err, schemaregistry.ErrIncompatible) {
		t.Fatalf("register an incompatible schema: %v, want ErrIncompatible", err)
	}
	if _, err := r2.Deserialize(append([]byte{0, 0x7f, 0xff, 0xff, 0xf0}, b[5:]...)); !errors.Is(err, schemaregistry.ErrSchemaNotFound) {
		t.Fatalf("unknown id: %v, want ErrSchemaNotFound", err)
	}
	js, err := schemaregistry.JSONSchema[regOrderV1](ctx, c, `{"type":"object","properties":{"ID":{"type":"integer"},"Item":{"type":"string"}}}`,
		schemaregistry.Options{Topic: topic + "-json", AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	jb, err := js.Serialize(regOrderV1{ID: 1, Item: "pen"})
	if err != nil {
		t.Fatal(err)
	}
	// A second client, cold cache: the id is fetched from the registry.
	c2, _ := schemaregistry.NewClient(schemaregistry.Config{URLs: []string{url}})
	js2, err := schemaregistry.JSONSchema[regOrderV1](ctx, c2, `{"type":"object","properties":{"ID":{"type":"integer"},"Item":{"type":"string"},"Note":{"type":"string"}}}`,
		schemaregistry.Options{Topic: topic + "-json2", AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := js2.Deserialize(jb); err != nil || got != (regOrderV1{ID: 1, Item: "pen"}) {
		t.Fatalf("JSON Schema round trip: %+v, %v", got, err)
	}
}

// setCompatibility sets a subject's compatibility level (PUT /config/{subject}).
func setCompatibility(t *testing.T, url, subject, level string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url+"/config/"+subject, strings.NewReader(`{"compatibility":"`+level+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /config/%s: %d %s", subject, resp.StatusCode, body)
	}
}
