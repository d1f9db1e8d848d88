// argocd-health evaluates a health.lua on manifests and prints one JSON object per file:
//
//	{"file": ..., "script": {"status", "message"}, "argocd": {"status", "message"}, "error": ...}
//
// "script" is what the Lua returns (as Argo CD's own health tests check it); "argocd" is what the
// Argo CD UI would show (an object being deleted is "Pending deletion" before any script runs).
// Scripts run as argocd-cm installs them (standard libraries skipped) unless -open-libs is given.
//
//	go run ./cmd/argocd-health -script ../resource_customizations/sandbox.coreweave.com/ManagedRunner/health.lua obj.yaml
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"argocd-healthcheck"
)

type verdict struct {
	File   string              `json:"file"`
	Script *healthcheck.Status `json:"script"`
	ArgoCD *healthcheck.Status `json:"argocd"`
	Error  string              `json:"error,omitempty"`
}

func main() {
	scriptPath := flag.String("script", "", "path of the health.lua to run (required)")
	openLibs := flag.Bool("open-libs", false, "open the Lua standard libraries (built-in scripts, useOpenLibs)")
	flag.Parse()
	if *scriptPath == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: argocd-health -script health.lua [-open-libs] manifest.yaml...")
		os.Exit(2)
	}
	script, err := os.ReadFile(*scriptPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	opts := healthcheck.Options{OpenLibs: *openLibs}
	out := json.NewEncoder(os.Stdout)
	failed := false
	for _, path := range flag.Args() {
		result := verdict{File: path}
		obj, err := healthcheck.LoadObject(path)
		if err == nil {
			result.Script, err = healthcheck.Run(string(script), obj, opts)
			result.ArgoCD, _ = healthcheck.ArgoCD(string(script), obj, opts)
		}
		if err != nil {
			result.Error = err.Error()
			failed = true
		}
		if err := out.Encode(result); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	if failed {
		os.Exit(1)
	}
}
