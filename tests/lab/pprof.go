package main

import (
	"net/http"
	_ "net/http/pprof" // served only when FERRY_LAB_PPROF is set
	"os"
)

// FERRY_LAB_PPROF=127.0.0.1:6060 serves Go's pprof endpoints of the lab process (vcsim, etcd),
// for investigating slow starts and benchmarks.
func init() {
	if addr := os.Getenv("FERRY_LAB_PPROF"); addr != "" && len(os.Args) > 1 && os.Args[1] != "internal-apiserver" && os.Args[1] != "internal-controller-manager" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
