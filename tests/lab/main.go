// Command ferry-lab runs ferry's test lab: embedded etcd, the real kube-apiserver and
// kube-controller-manager (as child processes of this same binary), vcsim and an S3 server.
// The binary is also kubectl when called as "kubectl" (symlink/hardlink) or "ferry-lab kubectl".
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"

	_ "time/tzdata"
)

func main() {
	base := filepath.Base(os.Args[0])
	if base == "kubectl" {
		os.Exit(runKubectl())
	}
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "kubectl":
			os.Args = append([]string{"kubectl"}, os.Args[2:]...)
			os.Exit(runKubectl())
		case "internal-apiserver":
			cmd := apiserverapp.NewAPIServerCommand()
			cmd.SetArgs(os.Args[2:])
			os.Exit(cli.Run(cmd))
		case "internal-controller-manager":
			cmd := kcmapp.NewControllerManagerCommand()
			cmd.SetArgs(os.Args[2:])
			os.Exit(cli.Run(cmd))
		case "shape":
			os.Exit(runShape(os.Args[2:]))
		case "tag":
			os.Exit(runTag(os.Args[2:]))
		case "guest-write":
			os.Exit(runGuestWrite(os.Args[2:]))
		case "version", "--version":
			fmt.Println(labVersion())
			return
		}
	}
	os.Exit(runLab(os.Args[1:]))
}

func runKubectl() int {
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) //nolint:errcheck
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

func labVersion() string {
	return strings.Join([]string{"ferry-lab", "kubernetes " + k8sVersion}, " ")
}
