// Package daemon wires Warren together: it opens the store, the image cache
// and runsc, builds the built-in image when missing, adopts the sandboxes of
// the previous run, then serves the API until its context ends.
//
// Start-up order matters: the store first (everything else records there),
// then runsc and images, then recovery (so no request sees a sandbox in a
// state left over from the last run), then the listener.
package daemon

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/backend/runsc"
	"github.com/warrenhq/warren/internal/fsutil"
	"github.com/warrenhq/warren/internal/image"
	"github.com/warrenhq/warren/internal/network"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/server"
	"github.com/warrenhq/warren/internal/snapshot"
	"github.com/warrenhq/warren/internal/store"
)

// Version is Warren's version, set at build time.
var Version = "dev"

// AdminTeam is the team of the admin key.
const AdminTeam = "admin"

// Run runs the daemon until ctx ends, then shuts down gracefully: the
// listener closes, requests in flight get ShutdownTimeoutS to finish, and
// sandboxes keep running for the next start to adopt.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("warren server must run as root: it makes network namespaces, cgroups and gVisor sandboxes")
	}
	for _, d := range []string{cfg.StateDir, cfg.CacheDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("making %s: %w", d, err)
		}
	}
	st, err := store.Open(ctx, filepath.Join(cfg.StateDir, "warren.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	if err := ensureAdminKey(ctx, st, filepath.Join(cfg.StateDir, "admin.key"), log); err != nil {
		return err
	}
	rt, err := runsc.New(cfg.RunscPath(), filepath.Join(cfg.StateDir, "runsc"), cfg.Platform)
	if err != nil {
		return err
	}
	// "agents", not "agent": sandboxes made before agents were kept per
	// build mount StateDir/agent, which is left as it is.
	agentDir, err := installAgent(cfg.AgentPath(), filepath.Join(cfg.StateDir, "agents"))
	if err != nil {
		return err
	}
	images, err := image.Open(filepath.Join(cfg.StateDir, "images"))
	if err != nil {
		return err
	}
	build := func(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
		return buildBuiltin(ctx, cfg, images, progress)
	}
	if cfg.BuildImage {
		if _, err := images.Get(ctx, image.BuiltinName); errors.Is(err, api.ErrNotFound) {
			log.Info("building the built-in image; this takes a few minutes the first time", "image", image.BuiltinName)
			last := ""
			_, err := build(ctx, func(p api.Progress) {
				if p.Message != "" && p.Message != last {
					log.Info("image build", "phase", p.Phase, "msg", p.Message)
					last = p.Message
				}
			})
			if err != nil {
				return fmt.Errorf("building the built-in image: %w", err)
			}
		} else if err != nil {
			return err
		}
	}
	pool, err := network.NewPool(cfg.Subnet)
	if err != nil {
		return err
	}
	fw := network.Firewall{Table: firewallTable(cfg.StateDir), Subnet: cfg.Subnet}
	if err := fw.Ensure(); err != nil {
		return fmt.Errorf("installing the sandbox firewall: %w", err)
	}
	host, _ := os.Hostname()
	snaps, err := snapshot.Open(filepath.Join(cfg.StateDir, "snapshots"))
	if err != nil {
		return err
	}
	m := sandbox.NewManager(sandbox.Config{
		StateDir: cfg.StateDir, AgentDir: agentDir, CgroupParent: "/warren", Node: host,
		DefaultCPUs: cfg.DefaultCPUs, DefaultMemoryMB: cfg.DefaultMemoryMB, DefaultDiskMB: cfg.DefaultDiskMB,
		MaxCPUs: cfg.MaxCPUs, MaxMemoryMB: cfg.MaxMemoryMB, MaxDiskMB: cfg.MaxDiskMB,
		DefaultImage:        cfg.DefaultImage,
		DefaultIdle:         api.IdlePolicy{TimeoutS: cfg.IdleTimeoutS, Action: "pause"},
		ReadyTimeout:        cfg.readyTimeout(),
		Platform:            cfg.Platform,
		StoreAfter:          time.Duration(cfg.StoreAfterS) * time.Second,
		MinAvailableMB:      cfg.MinAvailableMB,
		KeepCheckpoints:     cfg.KeepCheckpoints,
		PolicyInterval:      time.Duration(cfg.PolicyIntervalMS) * time.Millisecond,
		MaxParallelRestores: cfg.MaxParallelRestores,
		DefaultPoolSize:     cfg.TemplatePoolSize,
	}, st, images, rt, snaps, pool, log)
	netp, err := openNetworking(ctx, cfg, st, fw, log)
	if err != nil {
		return err
	}
	m.SetNetworking(netp.sandbox)
	defer netp.services.Close()
	acct := newAccounts(cfg, st, m, log)
	if err := m.Recover(ctx); err != nil {
		return fmt.Errorf("recovering sandboxes: %w", err)
	}
	if err := acct.start(ctx); err != nil {
		return err
	}
	defer acct.stop()
	defer m.Shutdown()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w; is another warren server running? pass --listen", cfg.Listen, err)
	}
	srv := &http.Server{
		Handler:           netp.wire(acct.wire(server.New(m, images, st, build, log, Version, rt.BuildID()))),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("warren server ready", "listen", ln.Addr().String(), "state_dir", cfg.StateDir,
		"runsc", rt.BuildID(), "admin_key", filepath.Join(cfg.StateDir, "admin.key"))

	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down; sandboxes keep running")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(cfg.ShutdownTimeoutS)*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	// The firewall stays while sandboxes run (they outlive the daemon);
	// with none left, the host is left as it was found.
	if left, err := st.ListSandboxes(sctx, store.Filter{}); err == nil && len(left) == 0 {
		if err := fw.Remove(); err != nil {
			log.Warn("removing the sandbox firewall", "table", fw.Table, "err", err)
		}
		rt.Release()
		if err := netp.volumes.UnmountAll(sctx); err != nil {
			log.Warn("unmounting volumes", "err", err)
		}
	}
	return nil
}

// firewallTable names the nftables table of the daemon on stateDir, so two
// daemons on one host (tests do that) keep their own.
func firewallTable(stateDir string) string {
	h := sha256.Sum256([]byte(stateDir))
	return "warren_" + hex.EncodeToString(h[:4])
}

// buildBuiltin builds (or finds in the cache) the built-in Debian image
// and registers it in the image store.
func buildBuiltin(ctx context.Context, cfg Config, images *image.Store, progress func(api.Progress)) (api.Image, error) {
	d := image.Debian{Mirror: cfg.Mirror}
	dir, digest, err := d.Build(ctx, cfg.CacheDir, progress)
	if err != nil {
		return api.Image{}, err
	}
	progress(api.Progress{Phase: "register", Message: "adding " + image.BuiltinName + " to the image store"})
	return images.AddRootfs(ctx, image.BuiltinName, digest, dir, "builtin")
}

// ensureAdminKey creates the admin team and key at first start, writing the
// key to path (mode 0600). The store keeps only its hash.
func ensureAdminKey(ctx context.Context, st *store.Store, path string, log *slog.Logger) error {
	team, err := st.EnsureTeam(ctx, "team-admin", AdminTeam)
	if err != nil {
		return err
	}
	if b, err := os.ReadFile(path); err == nil {
		if _, err := st.KeyByHash(ctx, server.HashKey(string(trimSpace(b)))); err == nil {
			return nil
		}
		log.Warn("admin.key does not match a key in the store; writing a new one", "path", path)
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	key := "wk_" + base64.RawURLEncoding.EncodeToString(raw)
	now := time.Now().UTC()
	tag := make([]byte, 4) // not from the key: ids are listed
	rand.Read(tag)
	id := adminFileKeyPrefix + now.Format("20060102150405") + "-" + hex.EncodeToString(tag)
	if err := st.CreateKey(ctx, store.Key{ID: id, TeamID: team.ID, Hash: server.HashKey(key), Admin: true, CreatedAt: now}); err != nil {
		return err
	}
	if err := sandbox.WriteFileAtomic(path, []byte(key+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing the admin key to %s: %w", path, err)
	}
	// The file holds the one admin key of the file: the key it held before
	// (lost, or replaced by hand) stops working, so that deleting admin.key
	// and restarting rotates the key.
	keys, err := st.ListKeys(ctx, team.ID)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.ID != id && strings.HasPrefix(k.ID, adminFileKeyPrefix) && k.RevokedAt == nil {
			if err := st.RevokeKey(ctx, k.ID, now); err != nil {
				return err
			}
			log.Info("revoked the previous admin key", "key_id", k.ID)
		}
	}
	log.Info("created the admin key", "path", path)
	return nil
}

// adminFileKeyPrefix starts the ids of the keys written to admin.key.
const adminFileKeyPrefix = "key-admin-"

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// installAgent copies the agent binary src into a directory of its own
// under dir, named by the binary's sha256, and returns that directory: the
// one mounted read-only into new sandboxes.
//
// A directory, once complete, is never rewritten. A checkpoint (snapshot,
// template, stored pause) keeps the agent's code mapped from that file and
// its spec names that directory, so a restore after an upgrade of Warren
// finds the exact binary the image was taken with. (Rewriting one shared
// file in place made restored agents run the new build's pages under the
// old build's memory and crash.)
func installAgent(src, dir string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("warren-agent binary %s: %w; run make build, or pass --agent", src, err)
	}
	defer in.Close()
	h := sha256.New()
	if _, err := io.Copy(h, in); err != nil {
		return "", fmt.Errorf("reading warren-agent binary %s: %w", src, err)
	}
	final := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(final, "warren-agent")); err == nil {
		return final, nil
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Leftovers of an install cut off by a crash; never mounted anywhere.
	stale, _ := filepath.Glob(filepath.Join(dir, ".install-*"))
	for _, d := range stale {
		os.RemoveAll(d)
	}
	tmpDir, err := os.MkdirTemp(dir, ".install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmpDir) // a no-op once renamed
	if err := os.Chmod(tmpDir, 0o755); err != nil {
		return "", err
	}
	out, err := os.OpenFile(filepath.Join(tmpDir, "warren-agent"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", fmt.Errorf("copying warren-agent into %s: %w", dir, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return "", err
	}
	if err := out.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmpDir, final); err != nil {
		return "", fmt.Errorf("installing warren-agent into %s: %w", final, err)
	}
	return final, fsutil.SyncDir(dir)
}
