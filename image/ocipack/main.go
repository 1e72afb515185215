// ocipack writes an OCI image layout from ready-made layer tarballs and an image config, with
// go-containerregistry: no container engine, no daemon, no registry. image/build.sh calls it.
//
//	ocipack --out DIR --ref NAME:TAG --layer a.tar --layer b.tar --user 65532:65532 \
//	        --entrypoint /usr/local/bin/ferry-controller --env K=V --label K=V --created RFC3339
//
// Layers are gzip-compressed as given (their order is kept); the result replaces DIR. It prints
// the manifest digest and the compressed size of the image as one JSON line.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ocipack:", err)
		os.Exit(1)
	}
}

func run() error {
	var layers, envs, labels, entrypoint list
	out := flag.String("out", "", "OCI layout directory to write (replaced)")
	ref := flag.String("ref", "", "reference name written as org.opencontainers.image.ref.name")
	user := flag.String("user", "", "config.User, e.g. 65532:65532")
	workdir := flag.String("workdir", "/", "config.WorkingDir")
	created := flag.String("created", "1970-01-01T00:00:00Z", "creation time (RFC 3339), for reproducible images")
	flag.Var(&layers, "layer", "an uncompressed layer tarball (repeat, bottom first)")
	flag.Var(&entrypoint, "entrypoint", "config.Entrypoint element (repeat)")
	flag.Var(&envs, "env", "config.Env entry K=V (repeat)")
	flag.Var(&labels, "label", "config.Labels entry K=V (repeat)")
	flag.Parse()
	if *out == "" || *ref == "" || len(layers) == 0 {
		return fmt.Errorf("--out, --ref and at least one --layer are required")
	}
	when, err := time.Parse(time.RFC3339, *created)
	if err != nil {
		return fmt.Errorf("--created: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, path := range layers {
		l, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return fmt.Errorf("layer %s: %w", path, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   l,
			History: v1.History{Created: v1.Time{Time: when}, CreatedBy: "ocipack --layer " + baseName(path)},
		})
		if err != nil {
			return err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Created = v1.Time{Time: when}
	cfg.Config.User = *user
	cfg.Config.WorkingDir = *workdir
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Env = envs
	cfg.Config.Labels = map[string]string{}
	for _, kv := range labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--label %q is not K=V", kv)
		}
		cfg.Config.Labels[k] = v
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}

	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	p, err := layout.Write(*out, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": *ref,
	})); err != nil {
		return err
	}

	digest, err := img.Digest()
	if err != nil {
		return err
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	size := m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"ref": *ref, "digest": digest.String(), "compressedBytes": size, "layers": len(m.Layers),
	})
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
