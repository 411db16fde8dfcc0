// Command portserver is run inside sandboxes by the ports tests: it
// answers HTTP with what it was sent, as JSON, and echoes WebSocket
// messages on /ws.
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"

	"github.com/coder/websocket"
)

func main() {
	listen := flag.String("listen", ":8001", "address to listen on")
	flag.Parse()
	http.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), b...)); err != nil {
				return
			}
		}
	})
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{
			"method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery,
			"authorization": r.Header.Get("Authorization"), "prefix": r.Header.Get("X-Forwarded-Prefix"),
		})
	})
	log.Fatal(http.ListenAndServe(*listen, nil))
}
