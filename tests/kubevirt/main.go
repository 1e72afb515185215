// ferry-kubevirt: KubeVirt's own virt-api and virt-controller (kubevirt.io/kubevirt), built as one
// multi-call binary for the lab. Dispatch on the first argument, or on argv[0] when the binary is
// linked under a command's name:
//
//	ferry-kubevirt virt-api ARGS         what cmd/virt-api/virt-api.go runs
//	ferry-kubevirt virt-controller ARGS  what cmd/virt-controller/virt-controller.go runs
//	ferry-kubevirt manifests [--namespace NS]  KubeVirt's install strategy (CRDs, RBAC, webhooks) as YAML
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

var commands = map[string]func(args []string){
	"virt-api":        runVirtAPI,
	"virt-controller": runVirtController,
	"manifests":       runManifests,
}

func main() {
	name := filepath.Base(os.Args[0])
	if cmd, ok := commands[name]; ok {
		cmd(os.Args[1:])
		return
	}
	if len(os.Args) > 1 {
		if cmd, ok := commands[os.Args[1]]; ok {
			// KubeVirt's commands parse os.Args themselves (pflag.Parse), so drop the sub-command.
			os.Args = append([]string{os.Args[0] + " " + os.Args[1]}, os.Args[2:]...)
			cmd(os.Args[1:])
			return
		}
	}
	fmt.Fprintf(os.Stderr, "usage: %s virt-api|virt-controller|manifests ARGS\n", name)
	os.Exit(2)
}
