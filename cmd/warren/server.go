package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/daemon"
)

// serverFlags are the flags of `warren server`; each one that is set
// overrides the config file and the environment.
type serverFlags struct {
	config       string
	stateDir     string
	listen       string
	cacheDir     string
	runsc        string
	agent        string
	subnet       string
	platform     string
	defaultImage string
	noBuildImage bool
	mirror       string
	logLevel     string
	logFormat    string
}

func (c *cli) serverCommand() *cobra.Command {
	var f *serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the Warren daemon (as root)",
		Long: `Run the Warren daemon until SIGINT or SIGTERM.

Settings come from the defaults, then the JSON file of --config, then the
environment (WARREN_STATE_DIR, WARREN_LISTEN, WARREN_CACHE_DIR, WARREN_SUBNET,
WARREN_LOG_LEVEL), then the flags given. Sandboxes keep running when the
daemon stops, and the next start adopts them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := serverConfig(cmd.Flags(), *f, os.Getenv)
			if err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			log, err := newLogger(c.errOut, cfg.LogLevel, f.logFormat)
			if err != nil {
				return err
			}
			return daemon.Run(cmd.Context(), cfg, log)
		},
	}
	f = addServerFlags(cmd.Flags())
	return cmd
}

// addServerFlags defines the flags of `warren server` in fl.
func addServerFlags(fl *pflag.FlagSet) *serverFlags {
	f := &serverFlags{}
	def := daemon.DefaultConfig()
	fl.StringVar(&f.config, "config", "", "JSON config file")
	fl.StringVar(&f.stateDir, "state-dir", def.StateDir, "state directory: metadata, images, sandboxes, admin.key")
	fl.StringVar(&f.listen, "listen", def.Listen, "the API's address")
	fl.StringVar(&f.cacheDir, "cache-dir", def.CacheDir, "cache of slow builds (runsc, the built-in image)")
	fl.StringVar(&f.runsc, "runsc", "", "runsc binary (default: downloaded into the cache directory)")
	fl.StringVar(&f.agent, "agent", "", "warren-agent binary (default: beside this executable)")
	fl.StringVar(&f.subnet, "subnet", def.Subnet, "IPv4 range sandbox links are carved from")
	fl.StringVar(&f.platform, "platform", def.Platform, "runsc platform: systrap, ptrace or kvm")
	fl.StringVar(&f.defaultImage, "default-image", def.DefaultImage, "image of a sandbox created without one")
	fl.BoolVar(&f.noBuildImage, "no-build-image", false, "do not build the built-in image at start")
	fl.StringVar(&f.mirror, "mirror", "", "Debian mirror for the built-in image (default: this host's)")
	fl.StringVar(&f.logLevel, "log-level", def.LogLevel, "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "text or json (to stderr)")
	return f
}

// serverConfig layers the defaults, the config file, the environment and
// the flags that were set, in that order.
func serverConfig(fl *pflag.FlagSet, f serverFlags, getenv func(string) string) (daemon.Config, error) {
	cfg := daemon.DefaultConfig()
	if f.config != "" {
		if err := cfg.LoadFile(f.config); err != nil {
			return cfg, err
		}
	}
	for env, field := range map[string]*string{
		"WARREN_STATE_DIR": &cfg.StateDir,
		"WARREN_LISTEN":    &cfg.Listen,
		"WARREN_CACHE_DIR": &cfg.CacheDir,
		"WARREN_SUBNET":    &cfg.Subnet,
		"WARREN_LOG_LEVEL": &cfg.LogLevel,
	} {
		if v := getenv(env); v != "" {
			*field = v
		}
	}
	for flag, set := range map[string]func(){
		"state-dir":      func() { cfg.StateDir = f.stateDir },
		"listen":         func() { cfg.Listen = f.listen },
		"cache-dir":      func() { cfg.CacheDir = f.cacheDir },
		"runsc":          func() { cfg.Runsc = f.runsc },
		"agent":          func() { cfg.Agent = f.agent },
		"subnet":         func() { cfg.Subnet = f.subnet },
		"platform":       func() { cfg.Platform = f.platform },
		"default-image":  func() { cfg.DefaultImage = f.defaultImage },
		"no-build-image": func() { cfg.BuildImage = !f.noBuildImage },
		"mirror":         func() { cfg.Mirror = f.mirror },
		"log-level":      func() { cfg.LogLevel = f.logLevel },
	} {
		if fl.Changed(flag) {
			set()
		}
	}
	return cfg, nil
}

// newLogger returns the daemon's logger, writing to w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("log level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("log format %q: use text or json", format)
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

func (c *cli) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show the client's version and the server's health",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			h, herr := cl.Health(cmd.Context())
			if c.json {
				out := struct {
					Client struct {
						Version string `json:"version"`
					} `json:"client"`
					Server *api.Health `json:"server,omitempty"`
					Error  string      `json:"error,omitempty"`
				}{}
				out.Client.Version = daemon.Version
				if herr == nil {
					out.Server = &h
				} else {
					out.Error = herr.Error()
				}
				if err := c.printJSON(out); err != nil {
					return err
				}
				return herr
			}
			fmt.Fprintf(c.out, "client: %s\n", daemon.Version)
			if herr != nil {
				return herr
			}
			fmt.Fprintf(c.out, "server: %s (%s) at %s, runsc %s\n", h.Version, h.Status, cl.BaseURL(), orDash(h.Runsc))
			return nil
		},
	}
}
