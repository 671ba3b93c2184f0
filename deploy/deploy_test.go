package deploy

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router/routerhttp"
)

// base is the kustomize base; routerConfig its router config file, which the
// configMapGenerator puts under its own name in the ConfigMap.
const (
	base         = "kubernetes/base"
	routerConfig = "router.yaml"
	configMap    = "warden-router-config"
	routerName   = "warden-router"
	redisName    = "warden-redis"
	routerBin    = "warden"
)

// objects is a set of decoded manifests.
type objects struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	pdbs        map[string]*policyv1.PodDisruptionBudget
	configMaps  map[string]*corev1.ConfigMap
}

func newObjects() *objects {
	return &objects{
		deployments: map[string]*appsv1.Deployment{},
		services:    map[string]*corev1.Service{},
		pdbs:        map[string]*policyv1.PodDisruptionBudget{},
		configMaps:  map[string]*corev1.ConfigMap{},
	}
}

// decode decodes one manifest strictly (sigs.k8s.io/yaml: unknown and
// duplicate fields are errors) into the API type its apiVersion and kind name,
// and adds it to o under its name. A kind the deployment does not use is an
// error.
func (o *objects) decode(src string, data []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	var (
		obj  metav1.Object
		into any
	)
	switch gvk := tm.APIVersion + " " + tm.Kind; gvk {
	case "apps/v1 Deployment":
		d := &appsv1.Deployment{}
		obj, into = d, d
	case "v1 Service":
		s := &corev1.Service{}
		obj, into = s, s
	case "policy/v1 PodDisruptionBudget":
		p := &policyv1.PodDisruptionBudget{}
		obj, into = p, p
	case "v1 ConfigMap":
		c := &corev1.ConfigMap{}
		obj, into = c, c
	default:
		return fmt.Errorf("%s: %q: not a kind this deployment uses", src, gvk)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		return fmt.Errorf("%s: %s %s: %w", src, tm.APIVersion, tm.Kind, err)
	}
	name := obj.GetName()
	if name == "" {
		return fmt.Errorf("%s: %s without metadata.name", src, tm.Kind)
	}
	switch v := into.(type) {
	case *appsv1.Deployment:
		o.deployments[name] = v
	case *corev1.Service:
		o.services[name] = v
	case *policyv1.PodDisruptionBudget:
		o.pdbs[name] = v
	case *corev1.ConfigMap:
		o.configMaps[name] = v
	}
	return nil
}

// baseManifests returns the resources the base's kustomization.yaml lists,
// read from disk, after decoding kustomization.yaml strictly into kustomize's
// own type.
func baseManifests(t *testing.T) (kusttypes.Kustomization, map[string][]byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(base, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kusttypes.Kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", base, err)
	}
	files := map[string][]byte{}
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(base, r))
		if err != nil {
			t.Fatal(err)
		}
		files[r] = b
	}
	return k, files
}

// Every file of the base decodes strictly into its Kubernetes API type, the
// kustomization lists every manifest of its directory, and a misspelt field
// is rejected (the strict decode is not a no-op).
func TestManifestsDecodeStrictly(t *testing.T) {
	k, files := baseManifests(t)
	o := newObjects()
	for name, data := range files {
		if err := o.decode(filepath.Join(base, name), data); err != nil {
			t.Error(err)
		}
	}
	entries, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		n := e.Name()
		if n == "kustomization.yaml" || n == routerConfig || !strings.HasSuffix(n, ".yaml") {
			continue
		}
		if !slices.Contains(k.Resources, n) {
			t.Errorf("%s/%s is not among kustomization.yaml's resources", base, n)
		}
	}
	if len(o.deployments) != 2 || len(o.services) != 2 || len(o.pdbs) != 1 {
		t.Errorf("base: %d Deployments, %d Services, %d PodDisruptionBudgets; want 2, 2, 1", len(o.deployments), len(o.services), len(o.pdbs))
	}
	bad := bytes.Replace(files["router-deployment.yaml"], []byte("readinessProbe:"), []byte("readynessProbe:"), 1)
	if err := newObjects().decode("misspelt", bad); err == nil || !strings.Contains(err.Error(), "readynessProbe") {
		t.Errorf("a Deployment with readynessProbe: err = %v, want an unknown-field error naming it", err)
	}
}

// The base's router.yaml loads with the router's own loader and validates.
func TestRouterConfigLoads(t *testing.T) {
	cfg, err := routerhttp.LoadConfig(filepath.Join(base, routerConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
}

// render runs kustomize's Go API over dir on disk and decodes every rendered
// object strictly.
func render(t *testing.T, dir string) *objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	o := newObjects()
	for _, r := range rm.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		if err := o.decode("rendered "+r.CurId().String(), data); err != nil {
			t.Error(err)
		}
	}
	return o
}

// The rendered base: two routers and one Redis, each Service and the budget
// selecting their Deployment's pods, the generated ConfigMap mounted where
// the router's --config points, its router config loading with the
// router's loader, state: naming the Redis Service, the probes on the
// router's own /ready and /health at its listener's port, and a grace period
// that covers the preStop hook and the router's whole shutdown.
func TestRenderedBase(t *testing.T) {
	o := render(t, base)
	if len(o.deployments) != 2 || len(o.services) != 2 || len(o.pdbs) != 1 || len(o.configMaps) != 1 {
		t.Fatalf("rendered: %d Deployments, %d Services, %d PodDisruptionBudgets, %d ConfigMaps; want 2, 2, 1, 1",
			len(o.deployments), len(o.services), len(o.pdbs), len(o.configMaps))
	}
	router, redis := o.deployments[routerName], o.deployments[redisName]
	if router == nil || redis == nil {
		t.Fatalf("rendered Deployments %v, want %s and %s", keys(o.deployments), routerName, redisName)
	}
	if r := router.Spec.Replicas; r == nil || *r != 2 {
		t.Errorf("router replicas %v, want 2", r)
	}
	for name, d := range o.deployments {
		checkSelects(t, "Deployment "+name, d.Spec.Selector, d)
		if svc := o.services[name]; svc == nil {
			t.Errorf("no Service %s for Deployment %s", name, name)
		} else {
			checkSelects(t, "Service "+name, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, d)
			for _, p := range svc.Spec.Ports {
				if _, err := containerPort(&d.Spec.Template.Spec.Containers[0], p.TargetPort); err != nil {
					t.Errorf("Service %s port %s: %v", name, p.Name, err)
				}
			}
		}
	}
	if pdb := o.pdbs[routerName]; pdb == nil {
		t.Errorf("no PodDisruptionBudget %s", routerName)
	} else {
		checkSelects(t, "PodDisruptionBudget "+routerName, pdb.Spec.Selector, router)
		if m := pdb.Spec.MinAvailable; m == nil || m.IntValue() < 1 || m.IntValue() >= int(*router.Spec.Replicas) {
			t.Errorf("PodDisruptionBudget minAvailable %v: want at least 1 and fewer than the %d replicas (else no node drain)", m, *router.Spec.Replicas)
		}
	}
	cfg := renderedConfig(t, o, router)
	checkRouterPod(t, router, cfg)
	checkState(t, cfg, o.services[redisName])
}

// renderedConfig finds the router's config volume's ConfigMap among o's (the
// generated name with its hash), parses its router.yaml with the router's
// loader and returns it with the defaults applied.
func renderedConfig(t *testing.T, o *objects, router *appsv1.Deployment) routerhttp.Config {
	t.Helper()
	var cmName string
	for _, v := range router.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	cm := o.configMaps[cmName]
	if cm == nil || !strings.HasPrefix(cmName, configMap+"-") {
		t.Fatalf("router's config volume names ConfigMap %q; rendered %v (want %s-<hash>)", cmName, keys(o.configMaps), configMap)
	}
	text, ok := cm.Data[routerConfig]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s (keys %v)", cmName, routerConfig, keys(cm.Data))
	}
	cfg, err := routerhttp.ParseConfig(strings.NewReader(text))
	if err != nil {
		t.Fatalf("ConfigMap %s %s: %v", cmName, routerConfig, err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("ConfigMap %s %s: %v", cmName, routerConfig, err)
	}
	c := &router.Spec.Template.Spec.Containers[0]
	path := flagValue(c.Command, "--config")
	var mounted bool
	for _, m := range c.VolumeMounts {
		mounted = mounted || (path == m.MountPath+"/"+routerConfig && m.Name == "config")
	}
	if !mounted {
		t.Errorf("router --config %q is not %s in the config volume's mount %v", path, routerConfig, c.VolumeMounts)
	}
	return cfg
}

// checkRouterPod checks the router's container against its config cfg: the
// command runs `warden route`, the probes call wire.PathReady (readiness) and
// wire.PathLive (liveness) on the port of cfg.Listen, the preStop hook is a
// sleep and the grace period covers it and cfg.ShutdownBound.
func checkRouterPod(t *testing.T, d *appsv1.Deployment, cfg routerhttp.Config) {
	t.Helper()
	spec := &d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("router pod: %d containers, want 1", len(spec.Containers))
	}
	c := &spec.Containers[0]
	if len(c.Command) < 2 || c.Command[0] != routerBin || c.Command[1] != "route" {
		t.Errorf("router command %q, want %s route ...", c.Command, routerBin)
	}
	_, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		t.Fatalf("listen %q: %v", cfg.Listen, err)
	}
	listenPort, _ := strconv.Atoi(portStr)
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"readinessProbe", c.ReadinessProbe, wire.PathReady}, {"livenessProbe", c.LivenessProbe, wire.PathLive}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("router %s: want an httpGet probe on %s", p.what, p.path)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("router %s path %q, want %q", p.what, p.probe.HTTPGet.Path, p.path)
		}
		if port, err := containerPort(c, p.probe.HTTPGet.Port); err != nil || port != listenPort {
			t.Errorf("router %s port %v (container port %d, %v), want the router's listen port %d", p.what, p.probe.HTTPGet.Port.String(), port, err, listenPort)
		}
	}
	var preStop time.Duration
	if l := c.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Sleep == nil {
		t.Errorf("router: no preStop sleep (the endpoints drop the pod before SIGTERM)")
	} else {
		preStop = time.Duration(l.PreStop.Sleep.Seconds) * time.Second
	}
	grace := time.Duration(0)
	if g := spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if need := preStop + cfg.ShutdownBound(); grace < need {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %v + the router's shutdown bound %v (drain_delay %v + drain_timeout %v + the cut grace)",
			grace, preStop, cfg.ShutdownBound(), cfg.DrainDelay, cfg.DrainTimeout)
	}
	if cfg.DrainDelay <= 0 {
		t.Errorf("drain_delay %v: behind a Service give it the time its endpoints take to update", cfg.DrainDelay)
	}
}

// checkState checks that the config's state: names the Redis Service's name
// and port.
func checkState(t *testing.T, cfg routerhttp.Config, svc *corev1.Service) {
	t.Helper()
	if svc == nil {
		t.Fatalf("no Service %s", redisName)
	}
	u, err := url.Parse(cfg.State)
	if err != nil || u.Scheme != "redis" {
		t.Fatalf("state %q: want redis://%s:PORT/DB (%v)", cfg.State, redisName, err)
	}
	var ok bool
	for _, p := range svc.Spec.Ports {
		ok = ok || (u.Hostname() == svc.Name && u.Port() == strconv.Itoa(int(p.Port)))
	}
	if !ok {
		t.Errorf("state %q does not name Service %s on one of its ports %v", cfg.State, svc.Name, svc.Spec.Ports)
	}
}

// checkSelects fails unless sel selects d's pod template.
func checkSelects(t *testing.T, what string, sel *metav1.LabelSelector, d *appsv1.Deployment) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		t.Errorf("%s: selector %v: %v (empty selects everything)", what, sel, err)
		return
	}
	if !s.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("%s: selector %s does not select Deployment %s's pods (labels %v)", what, s, d.Name, d.Spec.Template.Labels)
	}
}

// containerPort resolves a port by number or name among c's ports.
func containerPort(c *corev1.Container, p intstr.IntOrString) (int, error) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("port %s is none of container %s's ports", p.String(), c.Name)
}

// flagValue returns the word after flag in args ("" when absent).
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
