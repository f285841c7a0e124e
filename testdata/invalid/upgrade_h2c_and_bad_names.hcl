route "chat" {
  path     = "/chat"
  upstream = "http://127.0.0.1:9000"
  upgrade  = ["websocket", "h2c", "web socket", "WebSocket"]
}
