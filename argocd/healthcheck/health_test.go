package healthcheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// customizations is the tree laid out like Argo CD's resource_customizations/<group>/<Kind>/.
const customizations = "../resource_customizations"

type healthTests struct {
	Tests []struct {
		HealthStatus Status `json:"healthStatus"`
		InputPath    string `json:"inputPath"`
	} `json:"tests"`
}

func scriptDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(customizations, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "health.lua" {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatalf("no health.lua under %s", customizations)
	}
	return dirs
}

func readScript(t *testing.T, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestHealthScripts runs every case of every health_test.yaml, like Argo CD's own
// TestLuaHealthScript: status and message must be exactly equal. Each case runs twice: as an
// argocd-cm script (standard libraries skipped, the default) and as a built-in script (open).
func TestHealthScripts(t *testing.T) {
	for _, dir := range scriptDirs(t) {
		script := readScript(t, dir)
		raw, err := os.ReadFile(filepath.Join(dir, "health_test.yaml"))
		if err != nil {
			t.Fatalf("%s: a health.lua needs a health_test.yaml: %v", dir, err)
		}
		var cases healthTests
		if err := yaml.UnmarshalStrict(raw, &cases); err != nil {
			t.Fatalf("%s/health_test.yaml: %v", dir, err)
		}
		if len(cases.Tests) == 0 {
			t.Fatalf("%s/health_test.yaml has no tests", dir)
		}
		used := map[string]bool{}
		for _, tc := range cases.Tests {
			used[filepath.Clean(tc.InputPath)] = true
			for _, openLibs := range []bool{false, true} {
				name := filepath.Join(filepath.Base(dir), tc.InputPath)
				if openLibs {
					name += "(open libs)"
				}
				t.Run(name, func(t *testing.T) {
					obj, err := LoadObject(filepath.Join(dir, tc.InputPath))
					if err != nil {
						t.Fatal(err)
					}
					got, err := Run(script, obj, Options{OpenLibs: openLibs})
					if err != nil {
						t.Fatalf("script failed: %v", err)
					}
					if got == nil || *got != tc.HealthStatus {
						t.Errorf("got %+v\nwant %+v", got, tc.HealthStatus)
					}
				})
			}
		}
		// Every test input is used, so stale snapshots do not pile up unchecked.
		entries, _ := os.ReadDir(filepath.Join(dir, "testdata"))
		for _, entry := range entries {
			rel := filepath.Join("testdata", entry.Name())
			if !used[rel] {
				t.Errorf("%s/%s is not referenced by health_test.yaml", dir, rel)
			}
		}
	}
}

// TestManagedRunnerCoversEveryVerdict: the ManagedRunner cases reach each status the script can return.
func TestManagedRunnerCoversEveryVerdict(t *testing.T) {
	dir := filepath.Join(customizations, "sandbox.coreweave.com", "ManagedRunner")
	raw, err := os.ReadFile(filepath.Join(dir, "health_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cases healthTests
	if err := yaml.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, tc := range cases.Tests {
		seen[tc.HealthStatus.Status]++
		if tc.HealthStatus.Message == "" {
			t.Errorf("%s: every verdict needs a message a person can act on", tc.InputPath)
		}
	}
	for _, want := range []string{"Healthy", "Progressing", "Degraded", "Suspended"} {
		if seen[want] == 0 {
			t.Errorf("no test case expects %s (have %v)", want, seen)
		}
	}
}

// TestDeletingObjectsArePendingDeletionInArgoCD: the controller short-cuts deleting objects
// before running any script.
func TestDeletingObjectsArePendingDeletionInArgoCD(t *testing.T) {
	dir := filepath.Join(customizations, "sandbox.coreweave.com", "ManagedRunner")
	script := readScript(t, dir)
	found := 0
	files, _ := filepath.Glob(filepath.Join(dir, "testdata", "*.yaml"))
	sort.Strings(files)
	for _, file := range files {
		obj, err := LoadObject(file)
		if err != nil {
			t.Fatal(err)
		}
		meta, _ := obj["metadata"].(map[string]any)
		if meta["deletionTimestamp"] == nil {
			continue
		}
		found++
		got, err := ArgoCD(script, obj, Options{})
		if err != nil || *got != (Status{Status: "Progressing", Message: "Pending deletion"}) {
			t.Errorf("%s: got %+v, %v", file, got, err)
		}
	}
	if found == 0 {
		t.Error("no testdata object is being deleted")
	}
}

func object(t *testing.T, manifest string) map[string]any {
	t.Helper()
	obj, err := ParseObject([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

const sample = `
apiVersion: v1
kind: ConfigMap
metadata: {name: x, generation: 3}
data: {ratio: "1"}
status: {ratio: 0.5, list: [1, two, null], nothing: null}
`

// The harness itself must behave like Argo CD, or the script tests prove nothing.
func TestHarnessLikeArgoCD(t *testing.T) {
	obj := object(t, sample)
	cases := []struct {
		name, script string
		opts         Options
		want         *Status
		err          string
	}{
		{
			name: "argocd-cm scripts get base, table and a reduced os only",
			script: `local ok = string == nil and math == nil and io == nil and debug == nil and coroutine == nil
				and os.execute == nil and os.getenv == nil and os.remove == nil
				and type(os.time) == "function" and type(os.date) == "function"
				and type(table.concat) == "function" and type(pairs) == "function" and type(require) == "function"
				and require("os") == os
				return {status = ok and "Healthy" or "Degraded", message = "libs"}`,
			want: &Status{Status: "Healthy", Message: "libs"},
		},
		{
			name:   "open libraries on request",
			script: `return {status = (string ~= nil and math ~= nil) and "Healthy" or "Degraded", message = string.upper("x")}`,
			opts:   Options{OpenLibs: true},
			want:   &Status{Status: "Healthy", Message: "X"},
		},
		{
			name:   "string functions are missing without open libraries",
			script: `return {status = "Healthy", message = string.upper("x")}`,
			err:    "attempt to index a non-table object(nil)",
		},
		{
			name: "numbers are numbers, strings stay strings, null is nil",
			script: `local ok = type(obj.metadata.generation) == "number" and obj.metadata.generation == 3
				and type(obj.status.ratio) == "number" and obj.data.ratio == "1"
				and #obj.status.list == 2 and obj.status.list[2] == "two" and obj.status.nothing == nil
				return {status = ok and "Healthy" or "Degraded", message = "gen " .. obj.metadata.generation}`,
			want: &Status{Status: "Healthy", Message: "gen 3"},
		},
		{
			name:   "an unknown status is Unknown",
			script: `return {status = "Fine", message = "whatever"}`,
			want:   &Status{Status: "Unknown", Message: InvalidStatusMessage},
		},
		{
			name:   "a non-table result is an error",
			script: `return "Healthy"`,
			err:    "expect table output from Lua script, not string",
		},
		{
			name:   "no result is an error",
			script: `local x = 1`,
			err:    "expect table output from Lua script, not nil",
		},
		{
			name:   "an empty table is an error",
			script: `return {}`,
			err:    "cannot unmarshal array",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Run(tc.script, obj, tc.opts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error containing %q, got %+v, %v", tc.err, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *got != *tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestHarnessStopsRunawayScriptsAfterOneSecond(t *testing.T) {
	start := time.Now()
	_, err := Run(`while true do end`, object(t, sample), Options{})
	elapsed := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Fatalf("want a deadline error, got %v", err)
	}
	if elapsed < 900*time.Millisecond || elapsed > 5*time.Second {
		t.Fatalf("stopped after %s, want about one second", elapsed)
	}
}

func TestHarnessPendingDeletion(t *testing.T) {
	deleting := object(t, `
metadata: {name: x, deletionTimestamp: "2026-01-01T00:00:00Z", finalizers: [sandbox.coreweave.com/finalizer]}
`)
	got, _ := ArgoCD(`return {status = "Degraded", message = "from the script"}`, deleting, Options{})
	if *got != (Status{Status: "Progressing", Message: "Pending deletion"}) {
		t.Fatalf("got %+v", got)
	}
	hook := object(t, `
metadata: {name: x, deletionTimestamp: "2026-01-01T00:00:00Z", finalizers: [argocd.argoproj.io/hook-finalizer]}
`)
	got, _ = ArgoCD(`return {status = "Degraded", message = "from the script"}`, hook, Options{})
	if *got != (Status{Status: "Degraded", Message: "from the script"}) {
		t.Fatalf("got %+v", got)
	}
}
