"""The bench's webhook receiver, a process of its own (its CPU is not the sender's): http.server
on 127.0.0.1, answering every POST 200 at once, with nothing to read. Prints its port, then serves
until it is terminated. Imports nothing of the project: `python -m harness.webhook_receiver`."""

from http.server import BaseHTTPRequestHandler, HTTPServer


class Answer200(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main() -> None:
    server = HTTPServer(("127.0.0.1", 0), Answer200)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
