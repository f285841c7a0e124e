listen {
  http                       = ":8080"
  max_connections_per_client = -1
}
