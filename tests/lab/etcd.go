package main

import (
	"fmt"
	"net/url"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd starts etcd embedded in the lab process, data in DIR/etcd, plain HTTP on loopback
// only; it is ready once e.Server.ReadyNotify() is closed. The apiserver (a child process)
// talks to it over 127.0.0.1.
func startEtcd(dir string, clientPort, peerPort int, logFile string) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "ferry-lab"
	cfg.Dir = filepath.Join(dir, "etcd")
	cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogOutputs = []string{logFile}
	cfg.LogLevel = "warn"
	// The lab is a test fixture: skip fsync (a clean stop still leaves consistent data on disk).
	cfg.UnsafeNoFsync = true
	cfg.QuotaBackendBytes = 8 << 30
	cfg.MaxRequestBytes = 8 << 20
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "10m"
	cfg.SnapshotCount = 10000
	return embed.StartEtcd(cfg)
}
