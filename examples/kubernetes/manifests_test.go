package main

// The manifests in deploy/ are decoded strictly into the Kubernetes API's
// own types (an unknown or misspelt field fails, as the API server's
// strict field validation would), and checked against what the
// application reads: the environment the kubelet would give pod
// pageviews-<i> is built from them and read by settingsFromEnv, so the
// instance id, state directory, ports, probes and timeouts are checked as
// the program sees them. No cluster runs here.

import (
	"bytes"
	"debug/elf"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// deployDir holds the manifests.
const deployDir = "deploy"

// kstateHTTPShutdown is how long Run waits for the
// Options.Observability.HTTPAddr server to shut down (kstate's
// httpShutdownTimeout), after the batch in flight committed.
const kstateHTTPShutdown = 5 * time.Second

// graceMargin is what terminationGracePeriodSeconds keeps beyond the
// shutdown's bounds: closing the shards, the process's exit, a slow node.
const graceMargin = 10 * time.Second

// memoryHeadroom is what the container's memory limit keeps beyond
// State.Memory and GOMEMLIMIT: RocksDB outside its cache (table readers,
// pinned blocks, write batches), the Kafka client's buffers, thread
// stacks.
const memoryHeadroom = 256 << 20

// kustomization is the part of a kustomize file the example uses.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images"`
}

// deployment is deploy/, decoded.
type deployment struct {
	sts       *appsv1.StatefulSet
	svc       *corev1.Service
	cm        *corev1.ConfigMap
	pdb       *policyv1.PodDisruptionBudget
	netpol    *networkingv1.NetworkPolicy
	kust      *kustomization
	resources []string // the manifests' file names, sorted
}

// decodeStrict decodes one YAML object into v, failing on unknown and
// duplicate fields.
func decodeStrict(data []byte, v any) error {
	if len(regexp.MustCompile(`(?m)^---`).FindAllIndex(data, -1)) > 0 {
		return fmt.Errorf("more than one YAML document: keep one object per file")
	}
	return yaml.UnmarshalStrict(data, v)
}

// decodeManifest decodes one manifest into d by its apiVersion and kind.
func decodeManifest(d *deployment, name string, data []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return err
	}
	var dst any
	switch gvk := tm.APIVersion + " " + tm.Kind; gvk {
	case "apps/v1 StatefulSet":
		d.sts = &appsv1.StatefulSet{}
		dst = d.sts
	case "v1 Service":
		d.svc = &corev1.Service{}
		dst = d.svc
	case "v1 ConfigMap":
		d.cm = &corev1.ConfigMap{}
		dst = d.cm
	case "policy/v1 PodDisruptionBudget":
		d.pdb = &policyv1.PodDisruptionBudget{}
		dst = d.pdb
	case "networking.k8s.io/v1 NetworkPolicy":
		d.netpol = &networkingv1.NetworkPolicy{}
		dst = d.netpol
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		if name != "kustomization.yaml" {
			return fmt.Errorf("a Kustomization must be named kustomization.yaml")
		}
		d.kust = &kustomization{}
		return decodeStrict(data, d.kust)
	default:
		return fmt.Errorf("unexpected %q: the test knows StatefulSet, Service, ConfigMap, PodDisruptionBudget, NetworkPolicy and Kustomization", gvk)
	}
	d.resources = append(d.resources, name)
	return decodeStrict(data, dst)
}

// loadDeployment decodes every manifest of dir.
func loadDeployment(t *testing.T, dir string) deployment {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	var d deployment
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := decodeManifest(&d, filepath.Base(f), data); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	slices.Sort(d.resources)
	if d.sts == nil || d.svc == nil || d.cm == nil || d.pdb == nil || d.netpol == nil || d.kust == nil {
		t.Fatalf("%s: want a StatefulSet, a Service, a ConfigMap, a PodDisruptionBudget, a NetworkPolicy and a kustomization.yaml", dir)
	}
	return d
}

// podEnv is the environment the kubelet gives container c of pod podName
// in namespace ns: the ConfigMap's data for envFrom, then env in order,
// each value's $(VAR) expanded from the variables before it.
func podEnv(d deployment, c corev1.Container, podName, ns string) (map[string]string, []error) {
	var errs []error
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil || from.ConfigMapRef.Name != d.cm.Name {
			errs = append(errs, fmt.Errorf("envFrom %+v: want the ConfigMap %q", from, d.cm.Name))
			continue
		}
		for k, v := range d.cm.Data {
			env[from.Prefix+k] = v
		}
	}
	for _, e := range c.Env {
		v := e.Value
		switch src := e.ValueFrom; {
		case src == nil:
			v = expand(v, env)
		case src.FieldRef != nil:
			switch src.FieldRef.FieldPath {
			case "metadata.name":
				v = podName
			case "metadata.namespace":
				v = ns
			default:
				errs = append(errs, fmt.Errorf("env %s: fieldRef %q not known to the test", e.Name, src.FieldRef.FieldPath))
			}
		case src.ResourceFieldRef != nil:
			q, ok := c.Resources.Requests[corev1.ResourceName(strings.TrimPrefix(src.ResourceFieldRef.Resource, "requests."))]
			if !ok || !strings.HasPrefix(src.ResourceFieldRef.Resource, "requests.") {
				errs = append(errs, fmt.Errorf("env %s: resourceFieldRef %q: want a request the container sets", e.Name, src.ResourceFieldRef.Resource))
				continue
			}
			// The kubelet rounds up to the divisor (default 1).
			v = strconv.FormatInt(int64(math.Ceil(q.AsApproximateFloat64())), 10)
		case src.SecretKeyRef != nil:
			if src.SecretKeyRef.Name == "" || src.SecretKeyRef.Key == "" {
				errs = append(errs, fmt.Errorf("env %s: secretKeyRef without a name or key", e.Name))
			}
			v = "secret:" + src.SecretKeyRef.Name + "/" + src.SecretKeyRef.Key
		default:
			errs = append(errs, fmt.Errorf("env %s: valueFrom %+v not known to the test", e.Name, src))
		}
		env[e.Name] = v
	}
	return env, errs
}

// expand is the kubelet's $(VAR) expansion of an env value: $(VAR) of a
// variable defined before it is replaced, $$ is a $, the rest is left.
func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "$$"):
			b.WriteByte('$')
			i++
		case strings.HasPrefix(s[i:], "$("):
			if end := strings.IndexByte(s[i:], ')'); end > 0 {
				if v, ok := env[s[i+2:i+end]]; ok {
					b.WriteString(v)
					i += end
					continue
				}
			}
			b.WriteByte(s[i])
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// port is the number of a probe's or Service's port p on container c
// (by number or by container port name); 0 when c has no such port.
func port(c corev1.Container, p intstr.IntOrString) int32 {
	for _, cp := range c.Ports {
		if (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) || (p.Type == intstr.String && cp.Name == p.StrVal) {
			return cp.ContainerPort
		}
	}
	return 0
}

// addrPort is the port of a listen address such as ":8081".
func addrPort(addr string) int32 {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return int32(n)
}

// selects reports whether sel selects the pods labelled podLabels.
func selects(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(podLabels))
}

// checkDeployment returns every invariant d breaks for pod podName.
func checkDeployment(d deployment, podName string) (problems []error) {
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	const ns = "team-a"
	sts, spec := d.sts, d.sts.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		bad("StatefulSet: %d containers, want 1", len(spec.Containers))
		return problems
	}
	c := spec.Containers[0]
	env, errs := podEnv(d, c, podName, ns)
	problems = append(problems, errs...)
	for k, v := range env {
		if strings.Contains(v, "$(") {
			bad("env %s=%q: a $(VAR) left unexpanded (define VAR before it)", k, v)
		}
	}
	s, err := settingsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		bad("the app rejects the pod's environment: %v", err)
		return problems
	}
	o := s.opts

	// The instance id is the pod's name: stable across restarts, unique.
	if o.InstanceID != podName {
		bad("InstanceID %q, want the pod's name %q (env valueFrom fieldRef metadata.name)", o.InstanceID, podName)
	}

	// State.Dir is on the pod's persistent volume.
	claims := map[string]bool{}
	for _, vct := range sts.Spec.VolumeClaimTemplates {
		claims[vct.Name] = true
	}
	onVolume := false
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, o.State.Dir)
		if claims[m.Name] && !m.ReadOnly && err == nil && !strings.HasPrefix(rel, "..") {
			onVolume = true
		}
	}
	if !onVolume {
		bad("State.Dir %q is not on a writable mount of a volumeClaimTemplate (%v)", o.State.Dir, c.VolumeMounts)
	}

	// The probes are the App's: served on HTTPAddr's port, by Handler.
	app, err := kstate.New(s.top, o)
	if err != nil {
		bad("kstate.New with the pod's environment: %v", err)
		return problems
	}
	probes := []struct {
		name  string
		p     *corev1.Probe
		check func() (bool, string) // what the path must answer (before Run)
	}{{"readinessProbe", c.ReadinessProbe, app.Ready}, {"livenessProbe", c.LivenessProbe, app.Live}}
	for _, pr := range probes {
		if pr.p == nil || pr.p.HTTPGet == nil {
			bad("%s: want an httpGet probe", pr.name)
			continue
		}
		if got, want := port(c, pr.p.HTTPGet.Port), addrPort(o.Observability.HTTPAddr); got != want {
			bad("%s: port %v is container port %d, want HTTPAddr's %d", pr.name, pr.p.HTTPGet.Port.String(), got, want)
		}
		rec := httptest.NewRecorder()
		app.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, pr.p.HTTPGet.Path, nil))
		ok, reason := pr.check()
		if want := map[bool]int{true: 200, false: 503}[ok]; rec.Code != want || strings.TrimSpace(rec.Body.String()) != reason {
			bad("%s: GET %s answers %d %q, want %s's %d %q", pr.name, pr.p.HTTPGet.Path, rec.Code, rec.Body.String(), pr.name, want, reason)
		}
	}
	if lp := c.LivenessProbe; lp != nil {
		// /healthz stays 200 through a restore; a busy CPU must not make
		// a few slow answers a restart.
		if window := time.Duration(lp.PeriodSeconds*lp.FailureThreshold) * time.Second; window < 30*time.Second || lp.TimeoutSeconds < 3 {
			bad("livenessProbe: %v of failures (periodSeconds × failureThreshold), timeoutSeconds %d: want 30s or more and 3s or more", window, lp.TimeoutSeconds)
		}
	}

	// The grace period covers the whole graceful shutdown.
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if c.Lifecycle.PreStop.Sleep == nil {
			bad("preStop: only a sleep is counted by the test")
		} else {
			preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
	}
	shutdown := o.Timeouts.Shutdown
	if shutdown == 0 {
		shutdown = 30 * time.Second // kstate's default
	}
	need := preStop + shutdown + kstateHTTPShutdown + queryShutdownTimeout + graceMargin
	if spec.TerminationGracePeriodSeconds == nil || time.Duration(*spec.TerminationGracePeriodSeconds)*time.Second < need {
		bad("terminationGracePeriodSeconds %v: want at least %v (preStop %v + Timeouts.Shutdown %v + the HTTP servers' shutdown %v + %v + margin %v)",
			spec.TerminationGracePeriodSeconds, need, preStop, shutdown, kstateHTTPShutdown, queryShutdownTimeout, graceMargin)
	}

	// The headless Service names the pods as AdvertisedURL does, and its
	// query port is the one the app serves the queries on.
	u, err := url.Parse(o.Group.AdvertisedURL)
	if err != nil || o.Group.AdvertisedURL == "" {
		bad("AdvertisedURL %q: want the pod's query URL", o.Group.AdvertisedURL)
		return problems
	}
	if want := podName + "." + d.svc.Name + "." + ns + ".svc"; u.Hostname() != want {
		bad("AdvertisedURL %q: host %q, want %q (<pod>.<headless service>.<namespace>.svc)", u, u.Hostname(), want)
	}
	if sts.Spec.ServiceName != d.svc.Name || d.svc.Spec.ClusterIP != corev1.ClusterIPNone {
		bad("StatefulSet serviceName %q, Service %q with clusterIP %q: want the StatefulSet's headless Service", sts.Spec.ServiceName, d.svc.Name, d.svc.Spec.ClusterIP)
	}
	if !d.svc.Spec.PublishNotReadyAddresses {
		bad("Service: publishNotReadyAddresses false: a restoring pod's advertised name would not resolve")
	}
	queryPort := addrPort(s.queryAddr)
	if u.Scheme != "http" || u.Port() != strconv.Itoa(int(queryPort)) || port(c, intstr.FromInt32(queryPort)) == 0 {
		bad("AdvertisedURL %q: want http on the query port %d, a container port", u, queryPort)
	}
	served := false
	for _, sp := range d.svc.Spec.Ports {
		served = served || (strconv.Itoa(int(sp.Port)) == u.Port() && port(c, sp.TargetPort) == queryPort)
	}
	if !served {
		bad("Service: no port %s to the container's query port %d", u.Port(), queryPort)
	}
	if queryPort == addrPort(o.Observability.HTTPAddr) {
		bad("the queries and the probes share port %d: the probes' port is open to more callers", queryPort)
	}
	if !strings.HasPrefix(env["KSTATE_QUERY_TOKEN"], "secret:") {
		bad("KSTATE_QUERY_TOKEN: want it from a Secret (valueFrom secretKeyRef), not a literal")
	}

	// One selector, the pods' labels, everywhere.
	podLabels := sts.Spec.Template.Labels
	if !selects(sts.Spec.Selector, podLabels) || !selects(&metav1.LabelSelector{MatchLabels: d.svc.Spec.Selector}, podLabels) ||
		!selects(d.pdb.Spec.Selector, podLabels) || !selects(&d.netpol.Spec.PodSelector, podLabels) {
		bad("a selector (StatefulSet, Service, PodDisruptionBudget or NetworkPolicy) does not select the pods labelled %v", podLabels)
	}
	if mu := d.pdb.Spec.MaxUnavailable; mu == nil || mu.String() != "1" || d.pdb.Spec.MinAvailable != nil {
		bad("PodDisruptionBudget: maxUnavailable %v, minAvailable %v: want maxUnavailable 1 alone", mu, d.pdb.Spec.MinAvailable)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement || sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		bad("StatefulSet: podManagementPolicy %q, updateStrategy %q: want Parallel and RollingUpdate", sts.Spec.PodManagementPolicy, sts.Spec.UpdateStrategy.Type)
	}

	// Memory: the limit holds State.Memory, the Go heap's limit and a
	// headroom; requests = limits.
	goMem, err := parseBytes(env["GOMEMLIMIT"])
	if err != nil || goMem == 0 {
		bad("GOMEMLIMIT %q: want a limit for the Go heap: %v", env["GOMEMLIMIT"], err)
	}
	limit, request := c.Resources.Limits.Memory(), c.Resources.Requests.Memory()
	if need := o.State.Memory + goMem + memoryHeadroom; o.State.Memory == 0 || limit.Value() < need {
		bad("memory limit %v: want State.Memory %d + GOMEMLIMIT %d + %d MiB or more (State.Memory 0 leaves RocksDB unbounded)",
			limit, o.State.Memory, goMem, memoryHeadroom>>20)
	}
	if limit.Cmp(*request) != 0 {
		bad("memory request %v, limit %v: want them equal", request, limit)
	}
	if env["GOMAXPROCS"] == "" || env["GOMAXPROCS"] != strconv.FormatInt(c.Resources.Requests.Cpu().Value(), 10) {
		bad("GOMAXPROCS %q: want the CPU request, %v (pipelines follow GOMAXPROCS)", env["GOMAXPROCS"], c.Resources.Requests.Cpu())
	}

	// Every manifest is applied by the kustomization, which sets the
	// container's image.
	if !slices.Equal(slices.Sorted(slices.Values(d.kust.Resources)), d.resources) {
		bad("kustomization resources %v, want the manifests %v", d.kust.Resources, d.resources)
	}
	if len(d.kust.Images) != 1 || d.kust.Images[0].Name != c.Image {
		bad("kustomization images %+v: want one, named %q as the container's image", d.kust.Images, c.Image)
	}
	return problems
}

func TestManifests(t *testing.T) {
	d := loadDeployment(t, deployDir)
	for _, pod := range []string{d.sts.Name + "-0", d.sts.Name + "-2"} {
		for _, p := range checkDeployment(d, pod) {
			t.Errorf("pod %s: %v", pod, p)
		}
	}
}

// Each check can fail: a mistake made on purpose in a copy of the
// manifests is reported.
func TestManifestsChecksFail(t *testing.T) {
	for name, c := range map[string]struct {
		edit func(d *deployment)
		want string
	}{
		"instance id a constant":   {func(d *deployment) { setEnv(d, "KSTATE_INSTANCE_ID", "pageviews") }, "InstanceID"},
		"state dir off the volume": {func(d *deployment) { setEnv(d, "KSTATE_STATE_DIR", "/data/kstate") }, "State.Dir"},
		"readiness on /healthz":    {func(d *deployment) { container(d).ReadinessProbe.HTTPGet.Path = "/healthz" }, "readinessProbe: GET /healthz"},
		"liveness path misspelt":   {func(d *deployment) { container(d).LivenessProbe.HTTPGet.Path = "/health" }, "livenessProbe: GET /health"},
		"probe on the query port":  {func(d *deployment) { container(d).ReadinessProbe.HTTPGet.Port = intstr.FromString("query") }, "readinessProbe: port"},
		"liveness too eager":       {func(d *deployment) { container(d).LivenessProbe.FailureThreshold = 1 }, "livenessProbe"},
		"grace shorter than shutdown": {func(d *deployment) {
			d.cm.Data["KSTATE_SHUTDOWN_TIMEOUT"] = "2m"
		}, "terminationGracePeriodSeconds"},
		"URL on another service": {func(d *deployment) {
			setEnv(d, "KSTATE_ADVERTISED_URL", "http://$(POD_NAME).pageviews-headless.$(POD_NAMESPACE).svc:8080")
		}, "AdvertisedURL"},
		"URL before POD_NAME": {func(d *deployment) {
			env := container(d).Env
			i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "KSTATE_ADVERTISED_URL" })
			container(d).Env = append([]corev1.EnvVar{env[i]}, slices.Delete(slices.Clone(env), i, i+1)...)
		}, "unexpanded"},
		"PDB selects nothing":  {func(d *deployment) { d.pdb.Spec.Selector.MatchLabels = map[string]string{"app": "pageviews"} }, "selector"},
		"PDB maxUnavailable 2": {func(d *deployment) { v := intstr.FromInt32(2); d.pdb.Spec.MaxUnavailable = &v }, "maxUnavailable"},
		"memory limit too low": {func(d *deployment) { d.cm.Data["GOMEMLIMIT"] = "1536MiB" }, "memory limit"},
		"token literal":        {func(d *deployment) { setEnv(d, "KSTATE_QUERY_TOKEN", "s3cret") }, "Secret"},
		"ordered pods":         {func(d *deployment) { d.sts.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement }, "Parallel"},
		"manifest not applied": {func(d *deployment) { d.kust.Resources = d.kust.Resources[1:] }, "kustomization resources"},
	} {
		t.Run(name, func(t *testing.T) {
			d := loadDeployment(t, deployDir)
			c.edit(&d)
			problems := checkDeployment(d, d.sts.Name+"-1")
			if !slices.ContainsFunc(problems, func(err error) bool { return strings.Contains(err.Error(), c.want) }) {
				t.Fatalf("problems %v: want one with %q", problems, c.want)
			}
		})
	}
}

func container(d *deployment) *corev1.Container { return &d.sts.Spec.Template.Spec.Containers[0] }

// setEnv sets the literal value of the container's env variable name.
func setEnv(d *deployment, name, value string) {
	env := container(d).Env
	i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
	env[i] = corev1.EnvVar{Name: name, Value: value}
}

// The decoding is strict: a misspelt or misplaced field, a duplicate key
// or a second document fails.
func TestManifestsDecodeStrict(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(deployDir, "statefulset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func([]byte) []byte{
		"misspelt": func(b []byte) []byte {
			return bytes.Replace(b, []byte("terminationGracePeriodSeconds:"), []byte("terminationGracePeriodSecond:"), 1)
		},
		"misplaced": func(b []byte) []byte {
			return bytes.Replace(b, []byte("      containers:"), []byte("      failureThreshold: 3\n      containers:"), 1)
		},
		"duplicate": func(b []byte) []byte {
			return bytes.Replace(b, []byte("  replicas: 3"), []byte("  replicas: 3\n  replicas: 4"), 1)
		},
		"two documents": func(b []byte) []byte { return append(append(b, "---\n"...), b...) },
		"wrong type": func(b []byte) []byte {
			return bytes.Replace(b, []byte("  replicas: 3"), []byte("  replicas: three"), 1)
		},
	} {
		bad := edit(data)
		if bytes.Equal(bad, data) {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		var d deployment
		if err := decodeManifest(&d, "statefulset.yaml", bad); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
	var d deployment
	if err := decodeManifest(&d, "statefulset.yaml", data); err != nil {
		t.Fatalf("the file itself: %v", err)
	}
}

// The runtime image of the Dockerfile installs every shared library the
// program needs: the test binary links the same cgo libraries as the
// program (kstate with RocksDB), so its ELF dependencies are the
// program's. It also runs as the user the pods run as.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := regexp.MustCompile(`(?m)^FROM `).Split(string(data), -1)
	runtime := stages[len(stages)-1]
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) == 0 {
		t.Skip("a static binary (no cgo): nothing to install")
	}
	// The Debian 12 (bookworm) package of each library; libc's are in
	// every Debian image.
	pkgs := map[string]string{
		"libsnappy.so.1": "libsnappy1v5", "libz.so.1": "zlib1g", "libbz2.so.1.0": "libbz2-1.0", "liblz4.so.1": "liblz4-1",
		"libzstd.so.1": "libzstd1", "libstdc++.so.6": "libstdc++6", "libgcc_s.so.1": "libgcc-s1",
		"libc.so.6": "", "libm.so.6": "", "libpthread.so.0": "", "libdl.so.2": "", "ld-linux-x86-64.so.2": "", "libresolv.so.2": "",
	}
	for _, lib := range libs {
		pkg, known := pkgs[lib]
		switch {
		case !known:
			t.Errorf("the program needs %s: add its package to the Dockerfile's runtime stage and to this test", lib)
		case pkg != "" && !regexp.MustCompile(`\b`+regexp.QuoteMeta(pkg)+`\b`).MatchString(runtime):
			t.Errorf("the program needs %s: the Dockerfile's runtime stage does not install %s", lib, pkg)
		}
	}
	d := loadDeployment(t, deployDir)
	user := regexp.MustCompile(`(?m)^USER (\d+)`).FindStringSubmatch(runtime)
	sc := d.sts.Spec.Template.Spec.SecurityContext
	if user == nil || sc.RunAsUser == nil || user[1] != strconv.FormatInt(*sc.RunAsUser, 10) {
		t.Errorf("Dockerfile USER %v, pods' runAsUser %v: want the same numeric user", user, sc.RunAsUser)
	}
}
