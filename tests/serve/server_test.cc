// The server in-process: a tiny model directory, the server on a free loopback port in a
// thread, requests through cpp-httplib's client. Every error case is asserted on its status
// and OpenAI-style error body; embeddings are compared with SentenceEmbedder::encode of each
// text alone (what `rlx embed` computes), bit for bit where the batch composition is the same.
#include "rlx/serve/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "common/tiny_bert.h"
#include "common/tiny_llama.h"
#include "rlx/models/bpe_tokenizer.h"

namespace rlx::serve {
namespace {

using json = nlohmann::json;
using rlx::testing::TempDir;

// Max |a - b| over two equally long vectors.
double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

// The value of VmRSS in /proc/self/status, in KiB.
int64_t rss_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

struct Reply {
  int status = -1;
  json body;
  std::string text;
  std::string allow;  ///< the Allow header
};

// A running server on a tiny model; the reference embedder is a separate instance.
class ServeTest : public ::testing::Test {
 protected:
  // Length buckets of 4 tokens (rlx embed's 16 is the tiny model's whole max_length 16), so
  // mixed lengths batch in 4 buckets.
  static constexpr int64_t kBucket = 4;
  static models::EmbedderOptions embedder_options() {
    models::EmbedderOptions o;
    o.bucket = kBucket;
    return o;
  }

  void SetUp() override { dir_ = rlx::testing::write_tiny_bert(tmp_.path() / "tiny"); }
  void TearDown() override { shutdown(); }

  void start(ServerOptions o = {}, EmbeddingSchedulerOptions so = {}, int parallel = 1) {
    bind(o, so, parallel);
    run();
  }

  // Creates the server and binds its port (listening, nothing accepted yet).
  void bind(ServerOptions o = {}, EmbeddingSchedulerOptions so = {}, int parallel = 1) {
    o.port = 0;
    so.bucket = kBucket;
    std::vector<std::unique_ptr<models::SentenceEmbedder>> embedders;
    for (int i = 0; i < parallel; ++i)
      embedders.push_back(std::make_unique<models::SentenceEmbedder>(dir_, embedder_options()));
    ServedModel m;
    m.id = "tiny";
    m.created = 1700000000;
    scheduler_ = std::make_shared<EmbeddingScheduler>(std::move(embedders), so);
    m.embeddings = scheduler_;
    std::vector<ServedModel> served{m};
    served.insert(served.end(), extra_.begin(), extra_.end());
    server_ = std::make_unique<Server>(o, served);
    port_ = server_->bind();
  }

  // Serves on the bound port in a thread until shutdown().
  void run() {
    thread_ = std::thread([this] { server_->run(); });
    for (int i = 0; i < 2000 && !server_->is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(server_->is_running());
  }

  void shutdown() {
    if (!server_) return;
    server_->stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
  }

  Reply request(const std::string& method, const std::string& path, const std::string& body = "",
                const httplib::Headers& headers = {}) {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(30, 0);
    httplib::Result r = method == "POST"  ? cli.Post(path, headers, body, "application/json")
                        : method == "GET" ? cli.Get(path, headers)
                        : method == "PUT" ? cli.Put(path, headers, body, "application/json")
                                          : cli.Delete(path, headers);
    Reply out;
    if (!r) {
      ADD_FAILURE() << method << " " << path << ": no response (" << httplib::to_string(r.error())
                    << ")";
      return out;
    }
    out.status = r->status;
    out.text = r->body;
    out.allow = r->get_header_value("Allow");
    out.body = json::parse(r->body, nullptr, false);
    return out;
  }

  Reply embed(const json& body, const httplib::Headers& headers = {}) {
    return request("POST", "/v1/embeddings", body.dump(), headers);
  }

  // Asserts an OpenAI error object: status, a message containing `message`, param, code.
  static void expect_error(const Reply& r, int status, const std::string& message,
                           const std::string& param = "", const std::string& code = "") {
    EXPECT_EQ(r.status, status) << r.text;
    ASSERT_TRUE(r.body.is_object() && r.body.contains("error")) << r.text;
    const json& e = r.body["error"];
    ASSERT_TRUE(e.contains("message") && e.contains("type") && e.contains("param") &&
                e.contains("code"))
        << r.text;
    EXPECT_NE(e["message"].get<std::string>().find(message), std::string::npos) << r.text;
    EXPECT_TRUE(e["type"].is_string()) << r.text;
    if (param.empty())
      EXPECT_TRUE(e["param"].is_null()) << r.text;
    else
      EXPECT_EQ(e["param"], param) << r.text;
    if (code.empty())
      EXPECT_TRUE(e["code"].is_null()) << r.text;
    else
      EXPECT_EQ(e["code"], code) << r.text;
  }

  // SentenceEmbedder::encode of each text alone: one [1, seq] run, as `rlx embed TEXT`.
  std::vector<float> serial(const std::string& text) {
    if (!reference_)
      reference_ = std::make_unique<models::SentenceEmbedder>(dir_, embedder_options());
    Tensor t = reference_->encode({text});
    return {t.data_as<float>(), t.data_as<float>() + t.numel()};
  }

  static std::vector<float> row(const Reply& r, size_t i) {
    return r.body["data"][i]["embedding"].get<std::vector<float>>();
  }

  TempDir tmp_;
  std::string dir_;
  std::vector<ServedModel> extra_;  ///< served next to "tiny" (chat models)
  std::shared_ptr<EmbeddingScheduler> scheduler_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<models::SentenceEmbedder> reference_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(ServeTest, EmbeddingsMatchSerialEncodeBitForBitWithoutBatching) {
  start({}, EmbeddingSchedulerOptions{.max_batch = 1, .batch_window_ms = 0});
  const std::vector<std::string> texts = {"a man is eating food.", "a horse", "horses is a man"};
  Reply r = embed({{"model", "tiny"}, {"input", texts}});
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["object"], "list");
  EXPECT_EQ(r.body["model"], "tiny");
  ASSERT_EQ(r.body["data"].size(), texts.size());
  int64_t tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(r.body["data"][i]["object"], "embedding");
    EXPECT_EQ(r.body["data"][i]["index"], i);
    EXPECT_EQ(row(r, i), serial(texts[i])) << texts[i];  // bit for bit
    tokens += static_cast<int64_t>(reference_->tokenizer().encode(texts[i]).size());
  }
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], tokens);
  EXPECT_EQ(r.body["usage"]["total_tokens"], tokens);

  // A single string, and the same text as token ids ([CLS] ... [SEP] included).
  Reply one = embed({{"model", "tiny"}, {"input", texts[0]}});
  ASSERT_EQ(one.status, 200) << one.text;
  EXPECT_EQ(row(one, 0), serial(texts[0]));
  std::vector<int32_t> ids = reference_->tokenizer().encode(texts[0]);
  Reply tok = embed({{"model", "tiny"}, {"input", ids}});
  ASSERT_EQ(tok.status, 200) << tok.text;
  EXPECT_EQ(row(tok, 0), serial(texts[0]));
  Reply toks = embed({{"model", "tiny"}, {"input", {ids, ids}}});
  ASSERT_EQ(toks.status, 200) << toks.text;
  EXPECT_EQ(row(toks, 1), serial(texts[0]));
}

TEST_F(ServeTest, Base64IsTheLittleEndianF32OfTheFloats) {
  start();
  Reply f = embed({{"model", "tiny"}, {"input", "a man"}, {"encoding_format", "float"}});
  Reply b = embed({{"model", "tiny"}, {"input", "a man"}, {"encoding_format", "base64"}});
  ASSERT_EQ(f.status, 200) << f.text;
  ASSERT_EQ(b.status, 200) << b.text;
  const std::vector<float> floats = row(f, 0);
  std::string bytes(floats.size() * 4, '\0');
  std::memcpy(bytes.data(), floats.data(), bytes.size());
  EXPECT_EQ(b.body["data"][0]["embedding"], base64_encode(bytes.data(), bytes.size()));
  // The encoder against RFC 4648's test vectors (section 10).
  EXPECT_EQ(base64_encode("", 0), "");
  EXPECT_EQ(base64_encode("f", 1), "Zg==");
  EXPECT_EQ(base64_encode("fo", 2), "Zm8=");
  EXPECT_EQ(base64_encode("foobar", 6), "Zm9vYmFy");
  // dimensions equal to the model's width is accepted.
  Reply d = embed({{"model", "tiny"}, {"input", "a man"}, {"dimensions", 8}});
  ASSERT_EQ(d.status, 200) << d.text;
  EXPECT_EQ(row(d, 0), floats);
}

TEST_F(ServeTest, BatchingRoutesEachResultToItsRequest) {
  start({}, EmbeddingSchedulerOptions{.max_batch = 8, .batch_window_ms = 30}, 2);
  const std::vector<std::string> texts = {"a",
                                          "a man",
                                          "a man is",
                                          "a man is eating",
                                          "food",
                                          "horses",
                                          "a horse is eating food .",
                                          "man . man . man"};
  std::vector<std::vector<float>> want;
  for (const std::string& t : texts) want.push_back(serial(t));
  std::vector<Reply> got(texts.size() * 3);
  std::vector<std::thread> clients;
  for (size_t c = 0; c < got.size(); ++c)
    clients.emplace_back([&, c] {
      got[c] = embed({{"model", "tiny"}, {"input", texts[c % texts.size()]}});
    });
  for (std::thread& t : clients) t.join();
  for (size_t c = 0; c < got.size(); ++c) {
    ASSERT_EQ(got[c].status, 200) << got[c].text;
    // f32: batched rows differ from a [1, seq] run only by the GEMM's summation order.
    EXPECT_LE(max_diff(row(got[c], 0), want[c % texts.size()]), 1e-6) << texts[c % texts.size()];
  }
  // Some calls ran more than one sentence (24 requests within one 30 ms window, 2 workers).
  const std::string m = server_->metrics();
  EXPECT_NE(m.find("rlx_embedding_batch_size_count"), std::string::npos) << m;
  EXPECT_EQ(m.find("rlx_embedding_batches_total 24"), std::string::npos) << m;
}

// A burst of connections larger than cpp-httplib's listen backlog of 5, made while nothing
// accepts: every handshake completes at once (the kernel queues them; with a backlog of 5 the
// rest wait for a 1 s SYN retry or are reset under load, which made
// BatchingRoutesEachResultToItsRequest flaky), and each is served once the server runs.
TEST_F(ServeTest, ConnectionBurstIsQueuedUntilAccepted) {
  bind();
  constexpr int kClients = 48;
  std::vector<int> fds;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < kClients; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    ASSERT_TRUE(rc == 0 || errno == EINPROGRESS) << std::strerror(errno);
  }
  // Handshakes complete within a loopback round trip; 500 ms is far below the SYN retry (1 s).
  std::vector<pollfd> polls;
  for (int fd : fds) polls.push_back({fd, POLLOUT, 0});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  int connected = 0;
  while (connected < kClients && std::chrono::steady_clock::now() < deadline) {
    ::poll(polls.data(), polls.size(), 10);
    connected = 0;
    for (const pollfd& p : polls) connected += (p.revents & POLLOUT) != 0;
  }
  int errors = 0;
  for (int fd : fds) {
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    errors += err != 0;
  }
  EXPECT_EQ(connected, kClients);
  EXPECT_EQ(errors, 0);
  run();
  const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  int ok = 0;
  for (int fd : fds) {
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::send(fd, get.data(), get.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(get.size()))
      continue;
    std::string reply;
    char buf[512];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, n);
    ok += reply.rfind("HTTP/1.1 200", 0) == 0 && reply.find("\"ok\"") != std::string::npos;
    ::close(fd);
  }
  EXPECT_EQ(ok, kClients);
}

TEST_F(ServeTest, RequestErrorsAreOpenAiErrorObjects) {
  ServerOptions o;
  o.max_inputs = 4;
  o.max_body_bytes = 4096;
  start(o);
  Reply bad = request("POST", "/v1/embeddings", "{\"model\": \"tiny\", \"input\": ");
  expect_error(bad, 400, "We could not parse the JSON body of your request", "", "invalid_json");
  expect_error(request("POST", "/v1/embeddings", "[1, 2]"), 400,
               "The request body is array, expected a JSON object");
  expect_error(embed({{"model", "tiny"}}), 400, "'input' is a required property", "input");
  expect_error(embed({{"input", "a"}}), 400, "You must provide a model parameter", "model");
  expect_error(embed({{"model", 3}, {"input", "a"}}), 400, "'model' is integer", "model");
  expect_error(embed({{"model", "gpt-4"}, {"input", "a"}}), 404,
               "The model 'gpt-4' does not exist (this server serves: tiny)", "model",
               "model_not_found");
  expect_error(embed({{"model", "tiny"}, {"input", 42}}), 400,
               "'input' is integer, expected a string, an array of strings", "input");
  expect_error(embed({{"model", "tiny"}, {"input", ""}}), 400, "'input' is an empty string",
               "input");
  expect_error(embed({{"model", "tiny"}, {"input", json::array()}}), 400,
               "'input' is an empty array", "input");
  expect_error(embed({{"model", "tiny"}, {"input", {"a", ""}}}), 400,
               "'input[1]' is an empty string", "input");
  expect_error(embed({{"model", "tiny"}, {"input", {"a", 3}}}), 400,
               "'input[1]' is integer, expected a string, as input[0]", "input");
  expect_error(embed({{"model", "tiny"}, {"input", {json::array({4, 5}), "a"}}}), 400,
               "'input[1]' is string, expected a token-id array, as input[0]", "input");
  expect_error(embed({{"model", "tiny"}, {"input", {"a", "a", "a", "a", "a"}}}), 400,
               "'input' has 5 items; at most 4 are allowed per request", "input");
  expect_error(embed({{"model", "tiny"}, {"input", {2, 4, 99, 3}}}), 400,
               "'input[2]': token id 99 is outside the model's vocabulary [0, 12)", "input");
  expect_error(embed({{"model", "tiny"}, {"input", {2, 4.5, 3}}}), 400,
               "'input[1]' is number, expected an integer token id", "input");
  expect_error(embed({{"model", "tiny"}, {"input", {json::array()}}}), 400,
               "'input[0]' is an empty token array", "input");
  // 15 words + [CLS] + [SEP] = 17 tokens > the tiny model's max_seq_length 16.
  std::string long_text;
  for (int i = 0; i < 15; ++i) long_text += "a ";
  expect_error(embed({{"model", "tiny"}, {"input", long_text}}), 400,
               "'input' is 17 tokens long; the model's maximum input is 16 tokens", "input",
               "context_length_exceeded");
  expect_error(embed({{"model", "tiny"}, {"input", std::vector<int>(17, 4)}}), 400,
               "'input' is 17 tokens long; the model's maximum input is 16 tokens", "input",
               "context_length_exceeded");
  expect_error(embed({{"model", "tiny"}, {"input", "a"}, {"encoding_format", "hex"}}), 400,
               "'encoding_format' is \"hex\", expected \"float\" or \"base64\"", "encoding_format");
  expect_error(embed({{"model", "tiny"}, {"input", "a"}, {"dimensions", 4}}), 400,
               "produces 8-dimensional embeddings and does not support dimensions=4", "dimensions");
  expect_error(embed({{"model", "tiny"}, {"input", "a"}, {"dimensions", "4"}}), 400,
               "'dimensions' is string, expected an integer", "dimensions");
  expect_error(embed({{"model", "tiny"}, {"input", "a"}, {"user", 1}}), 400,
               "'user' is integer, expected a string", "user");
  expect_error(embed({{"model", "tiny"}, {"input", "a"}, {"temperature", 1}}), 400,
               "Unrecognized request argument supplied: temperature", "temperature");
  expect_error(embed({{"model", "tiny"}, {"input", std::string(5000, 'a')}}), 413,
               "The request body exceeds the server's limit of 4096 bytes", "",
               "request_too_large");
  expect_error(request("GET", "/v1/nothing"), 404, "Invalid URL (GET /v1/nothing)", "",
               "unknown_url");
  Reply wrong = request("GET", "/v1/embeddings");
  expect_error(wrong, 405, "Method GET is not allowed on /v1/embeddings (allowed: POST)", "",
               "method_not_allowed");
  EXPECT_EQ(wrong.allow, "POST");
  expect_error(request("DELETE", "/v1/models"), 405, "Method DELETE is not allowed", "",
               "method_not_allowed");
  expect_error(request("GET", "/v1/models/nope"), 404, "The model 'nope' does not exist", "model",
               "model_not_found");

  // The server still answers, and counted the failures by endpoint and status.
  Reply ok = embed({{"model", "tiny"}, {"input", "a"}, {"user", "u1"}});
  EXPECT_EQ(ok.status, 200) << ok.text;
  Reply metrics = request("GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  for (const char* line :
       {"rlx_http_requests_total{endpoint=\"/v1/embeddings\",status=\"400\"} 22",
        "rlx_http_requests_total{endpoint=\"/v1/embeddings\",status=\"413\"} 1",
        "rlx_http_requests_total{endpoint=\"/v1/embeddings\",status=\"404\"} 1",
        "rlx_http_requests_total{endpoint=\"/v1/embeddings\",status=\"405\"} 1",
        "rlx_http_requests_total{endpoint=\"/v1/embeddings\",status=\"200\"} 1",
        "rlx_http_requests_total{endpoint=\"other\",status=\"404\"} 1",
        "rlx_http_request_duration_seconds_count{endpoint=\"/v1/embeddings\"} 26",
        "rlx_embedding_prompt_tokens_total 3", "rlx_embedding_inputs_total 1",
        "rlx_queue_depth{model=\"tiny\"} 0"})
    EXPECT_NE(metrics.text.find(line), std::string::npos) << line << "\n" << metrics.text;
}

TEST_F(ServeTest, TruncateCutsLongInputsAsEmbedDoes) {
  ServerOptions o;
  o.truncate = true;
  start(o);
  std::string long_text;
  for (int i = 0; i < 20; ++i) long_text += "man ";
  Reply r = embed({{"model", "tiny"}, {"input", long_text}});
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(row(r, 0), serial(long_text));  // encode() truncates to max_length 16
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 16);
}

TEST_F(ServeTest, ModelsHealthAndMetrics) {
  start();
  Reply models = request("GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.body, json::parse(R"({"object":"list","data":[{"id":"tiny","object":"model",
            "created":1700000000,"owned_by":"rlx"}]})"));
  Reply one = request("GET", "/v1/models/tiny");
  ASSERT_EQ(one.status, 200);
  EXPECT_EQ(one.body["id"], "tiny");
  Reply health = request("GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, json({{"status", "ok"}}));
  Reply metrics = request("GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.text.find("# TYPE rlx_http_requests_total counter"), std::string::npos);
  EXPECT_NE(metrics.text.find("# TYPE rlx_embedding_batch_size histogram"), std::string::npos);
  EXPECT_NE(metrics.text.find("rlx_embedding_batch_size_bucket{le=\"32\"} 0"), std::string::npos)
      << metrics.text;
}

TEST_F(ServeTest, ApiKeyIsRequiredOnV1AndMetrics) {
  ServerOptions o;
  o.api_key = "sk-test-123";
  start(o);
  const json body = {{"model", "tiny"}, {"input", "a"}};
  expect_error(embed(body), 401, "You didn't provide an API key", "", "missing_api_key");
  expect_error(embed(body, {{"Authorization", "Bearer sk-test-124"}}), 401,
               "Incorrect API key provided", "", "invalid_api_key");
  expect_error(embed(body, {{"Authorization", "Bearer sk-test-1234"}}), 401,
               "Incorrect API key provided", "", "invalid_api_key");
  expect_error(embed(body, {{"Authorization", "sk-test-123"}}), 401, "Incorrect API key", "",
               "invalid_api_key");
  expect_error(request("GET", "/metrics"), 401, "You didn't provide an API key", "",
               "missing_api_key");
  EXPECT_EQ(embed(body, {{"Authorization", "Bearer sk-test-123"}}).status, 200);
  EXPECT_EQ(request("GET", "/v1/models", "", {{"Authorization", "Bearer sk-test-123"}}).status,
            200);
  EXPECT_EQ(request("GET", "/health").status, 200);  // liveness probes need no key
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
}

TEST_F(ServeTest, FullQueueAnswers429) {
  ServerOptions o;
  // One request in flight at most; it waits 400 ms for company before its batch runs.
  start(o, EmbeddingSchedulerOptions{.max_batch = 8, .batch_window_ms = 400, .max_queue = 1});
  Reply first;
  std::thread t([&] { first = embed({{"model", "tiny"}, {"input", "a man"}}); });
  for (int i = 0; i < 2000 && scheduler_->queue_depth() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(scheduler_->queue_depth(), 1);
  expect_error(embed({{"model", "tiny"}, {"input", "a horse"}}), 429,
               "the server's queue is full (1 requests in flight, --max-queue 1)", "",
               "queue_full");
  t.join();
  EXPECT_EQ(first.status, 200) << first.text;
  EXPECT_EQ(row(first, 0), serial("a man"));
}

TEST_F(ServeTest, SlowRequestTimesOutWith504AndIsWithdrawn) {
  ServerOptions o;
  o.timeout_ms = 50;
  start(o, EmbeddingSchedulerOptions{.max_batch = 8, .batch_window_ms = 5000});
  expect_error(embed({{"model", "tiny"}, {"input", "a man"}}), 504,
               "The request was not answered within the server's timeout of 50 ms", "", "timeout");
  EXPECT_EQ(scheduler_->queue_depth(), 0);  // its slot is free again
}

TEST_F(ServeTest, StopDrainsTheRequestsInFlight) {
  start({}, EmbeddingSchedulerOptions{.max_batch = 8, .batch_window_ms = 300});
  std::vector<Reply> replies(4);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < replies.size(); ++i)
    clients.emplace_back([&, i] { replies[i] = embed({{"model", "tiny"}, {"input", "a man"}}); });
  for (int i = 0; i < 2000 && scheduler_->queue_depth() < 4; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(scheduler_->queue_depth(), 4);
  server_->stop();  // while all four wait for their batch
  thread_.join();   // run() returned: everything admitted was answered
  for (std::thread& t : clients) t.join();
  for (const Reply& r : replies) {
    EXPECT_EQ(r.status, 200) << r.text;
    EXPECT_LE(max_diff(row(r, 0), serial("a man")), 1e-6);
  }
  EXPECT_THROW(scheduler_->submit({reference_->tokenizer().encode_full("a", 16)}),
               ShuttingDownError);
  server_.reset();
}

TEST_F(ServeTest, LoadTest32ClientsTimes50Requests) {
  start({}, EmbeddingSchedulerOptions{.max_batch = 16, .batch_window_ms = 2}, 2);
  const std::vector<std::string> words = {"a",    "man",   "is",     "eating",
                                          "food", "horse", "horses", "."};
  // 64 texts of 1..7 words, and their serial embeddings.
  std::mt19937 rng(3);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng() % 7);  // 2..16 tokens: every length bucket
    for (int w = 0; w < n; ++w) t += words[rng() % words.size()] + " ";
    texts.push_back(t);
  }
  std::vector<std::vector<float>> want;
  for (const std::string& t : texts) want.push_back(serial(t));
  embed({{"model", "tiny"}, {"input", texts[0]}});  // warm: compile before measuring RSS
  const int64_t rss_before = rss_kib();
  constexpr int kClients = 32, kRequests = 50;
  std::atomic<int> answered{0}, wrong{0}, failed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      httplib::Client cli("127.0.0.1", port_);  // one keep-alive connection per client
      cli.set_keep_alive(true);
      cli.set_read_timeout(60, 0);
      for (int k = 0; k < kRequests; ++k) {
        // One or two inputs per request.
        const size_t a = static_cast<size_t>(c * kRequests + k) % texts.size();
        const size_t b = (a * 7 + 3) % texts.size();
        const bool two = k % 3 == 0;
        json in = two ? json{texts[a], texts[b]} : json(texts[a]);
        auto r = cli.Post("/v1/embeddings", json{{"model", "tiny"}, {"input", in}}.dump(),
                          "application/json");
        if (!r || r->status != 200) {
          if (failed++ == 0)
            ADD_FAILURE() << (r ? std::to_string(r->status) + " " + r->body
                                : "no response: " + httplib::to_string(r.error()));
          continue;
        }
        ++answered;
        json j = json::parse(r->body);
        if (j["data"].size() != (two ? 2u : 1u) ||
            max_diff(j["data"][0]["embedding"].get<std::vector<float>>(), want[a]) > 1e-6 ||
            (two && max_diff(j["data"][1]["embedding"].get<std::vector<float>>(), want[b]) > 1e-6))
          ++wrong;
      }
    });
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(answered, kClients * kRequests);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(wrong, 0);
  const int64_t rss_after = rss_kib();
  // Bounded: 1600 requests leave no per-request state behind (64 MiB of slack for allocator
  // arenas of the 64 connection threads and the compiled executables of new batch shapes).
  EXPECT_LT(rss_after - rss_before, 64 * 1024) << rss_before << " -> " << rss_after << " KiB";
  EXPECT_EQ(scheduler_->queue_depth(), 0);
  EXPECT_EQ(scheduler_->pending_sentences(), 0);
}

TEST_F(ServeTest, BadConfigurationIsAnError) {
  auto scheduler = [&](EmbeddingSchedulerOptions so) {
    std::vector<std::unique_ptr<models::SentenceEmbedder>> e;
    e.push_back(std::make_unique<models::SentenceEmbedder>(dir_));
    return std::make_shared<EmbeddingScheduler>(std::move(e), so);
  };
  EXPECT_EQ(rlx::testing::error_of([&] { scheduler({.max_batch = 0}); }),
            "EmbeddingScheduler: max_batch must be >= 1, got 0");
  EXPECT_EQ(rlx::testing::error_of([&] { scheduler({.max_queue = 0}); }),
            "EmbeddingScheduler: max_queue must be >= 1, got 0");
  EXPECT_EQ(rlx::testing::error_of([&] { EmbeddingScheduler s({}, {}); }),
            "EmbeddingScheduler: needs at least one SentenceEmbedder");
  EXPECT_EQ(rlx::testing::error_of([&] { Server s({}, {}); }), "Server: needs at least one model");
  auto s = scheduler({});
  EXPECT_EQ(rlx::testing::error_of([&] {
              Server x({}, {{"m", 0, s, nullptr}, {"m", 0, s, nullptr}});
            }),
            "Server: two models with the id 'm'");
  EXPECT_EQ(rlx::testing::error_of([&] {
              Server x({}, {{"m", 0, nullptr, nullptr}});
            }),
            "Server: model 'm' needs exactly one scheduler (embeddings or chat)");
  EXPECT_EQ(rlx::testing::error_of([&] { s->submit({}); }),
            "EmbeddingScheduler::submit: a request needs at least one input");
  // A port already taken.
  ServerOptions o;
  o.port = 0;
  Server first(o, {{"m", 0, s, nullptr}});
  o.port = first.bind();
  Server second(o, {{"m", 0, s, nullptr}});
  EXPECT_EQ(rlx::testing::error_of([&] { second.bind(); }),
            "rlx serve: cannot listen on 127.0.0.1:" + std::to_string(o.port) +
                " (address in use, or not an address of this machine)");
}

// ---- chat/completions

// The tiny chat decoder (tests/common/tiny_llama.h) as a ChatScheduler of `parallel` slots of
// `ctx` positions.
std::shared_ptr<ChatScheduler> tiny_chat(const std::string& path, int64_t parallel,
                                         int64_t ctx = 128) {
  models::LlamaOptions o;
  o.ctx = ctx;
  ChatSchedulerOptions so;
  so.parallel = parallel;
  return std::make_shared<ChatScheduler>(models::LlamaModel::load(path, o), so);
}

models::GenerateOptions request_options(int i) {
  models::GenerateOptions o;
  o.max_tokens = 6 + i;
  o.stop_at_eos = false;
  o.reuse_prefix = false;
  if (i % 3 != 0) {  // greedy, or sampled with a seed of its own
    models::SamplingParams p;
    p.temperature = 1.2f;
    p.presence_penalty = 0.5f;
    p.seed = static_cast<uint32_t>(100 + i);
    o.sampling = p;
  }
  return o;
}

// Continuous batching in process: 7 requests (greedy and sampled) submitted at once to 3 slots,
// so slots refill as sequences finish; each result equals LlamaModel::generate of that request
// alone (a batch-1 cache), token for token.
TEST(ChatSchedulerTest, ConcurrentRequestsEqualGenerateAlone) {
  const std::string path = rlx::testing::write(rlx::testing::tiny_chat_file(), "chat_sched.gguf");
  auto scheduler = tiny_chat(path, 3);
  models::LlamaOptions lo;
  lo.ctx = 128;
  models::LlamaModel alone = models::LlamaModel::load(path, lo);
  std::vector<ChatRequest> requests;
  for (int i = 0; i < 7; ++i)
    requests.push_back({alone.tokenizer().encode("prompt " + std::to_string(i) + ": hello", true),
                        request_options(i)});
  std::vector<ChatTicket> tickets;
  for (const ChatRequest& r : requests) tickets.push_back(scheduler->submit(r));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (size_t i = 0; i < tickets.size(); ++i) {
    std::string streamed;
    for (;;) {
      ChatUpdate u = tickets[i].wait(deadline);
      streamed += u.text;
      if (u.finished) break;
      ASSERT_FALSE(u.timed_out) << "request " << i;
    }
    models::GenerateResult want = alone.generate(requests[i].prompt, requests[i].options);
    EXPECT_EQ(tickets[i].error(), "");
    EXPECT_EQ(tickets[i].text(), want.text) << "request " << i;
    EXPECT_EQ(streamed, want.text) << "request " << i;
    EXPECT_EQ(tickets[i].completion_tokens(), static_cast<int64_t>(want.ids.size()));
    EXPECT_EQ(tickets[i].stop_reason(), want.stats.stop_reason);
  }
  EXPECT_EQ(scheduler->queue_depth(), 0);
  EXPECT_NE(tickets[1].text(), tickets[2].text());
  // Misuse of submit: an empty prompt, one longer than a slot.
  EXPECT_EQ(rlx::testing::error_of([&] { scheduler->submit({}); }),
            "ChatScheduler::submit: the prompt is empty");
  EXPECT_NE(rlx::testing::error_of([&] {
              scheduler->submit({std::vector<int32_t>(129, 1), {}});
            }).find("the prompt is 129 tokens long; a sequence holds at most 128"),
            std::string::npos);
}

// The steps that produced a request's tokens are reported to the observers (the server's
// metrics) before the request completes: a client that reads /metrics right after its reply
// sees them. A slow observer makes the old order (complete, then report) fail every time.
TEST(ChatSchedulerTest, StepsAreReportedBeforeTheirRequestsComplete) {
  const std::string path = rlx::testing::write(rlx::testing::tiny_chat_file(), "chat_obs.gguf");
  auto scheduler = tiny_chat(path, 2);
  std::atomic<int64_t> generated{0}, prefills{0};
  scheduler->add_step_observer([&](const ChatStepReport& r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    generated += r.generated;
    if (r.prefill) ++prefills;
  });
  for (int max_tokens : {1, 4}) {  // finished by the prefill step, then by a decode step
    models::GenerateOptions o = request_options(0);
    o.max_tokens = max_tokens;
    const int64_t before = generated.load();
    ChatTicket t = scheduler->submit({{1, 2, 3}, o});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (ChatUpdate u = t.wait(deadline); !u.finished; u = t.wait(deadline))
      ASSERT_FALSE(u.timed_out);
    EXPECT_EQ(t.completion_tokens(), max_tokens);
    EXPECT_EQ(generated.load() - before, max_tokens) << "max_tokens " << max_tokens;
  }
  EXPECT_EQ(prefills.load(), 2);
}

// A server with an embedding model and a chat model: each endpoint family answers for its own
// kind only, /v1/models lists both, and the metrics have the chat families.
TEST_F(ServeTest, ChatAndEmbeddingModelsSideBySide) {
  const std::string path = rlx::testing::write(rlx::testing::tiny_chat_file(), "chat_side.gguf");
  ServedModel chat;
  chat.id = "tiny-chat";
  chat.created = 1700000001;
  chat.chat = tiny_chat(path, 2);
  extra_.push_back(chat);
  start();
  Reply models = request("GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.body["data"].size(), 2u);
  EXPECT_EQ(models.body["data"][1]["id"], "tiny-chat");
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  Reply r = request("POST", "/v1/chat/completions",
                    json{{"model", "tiny-chat"}, {"messages", messages}, {"max_tokens", 4}}.dump());
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["object"], "chat.completion");
  EXPECT_EQ(
      r.body["usage"]["completion_tokens"].get<int>() + r.body["usage"]["prompt_tokens"].get<int>(),
      r.body["usage"]["total_tokens"].get<int>());
  expect_error(request("POST", "/v1/chat/completions",
                       json{{"model", "tiny"}, {"messages", messages}}.dump()),
               400, "serves embeddings", "model", "model_not_supported");
  expect_error(request("POST", "/v1/completions", json{{"model", "tiny"}, {"prompt", "a"}}.dump()),
               400, "serves embeddings", "model", "model_not_supported");
  expect_error(embed({{"model", "tiny-chat"}, {"input", "a"}}), 400, "generates text", "model",
               "model_not_supported");
  expect_error(request("GET", "/v1/chat/completions"), 405, "not allowed", "",
               "method_not_allowed");
  const std::string m = request("GET", "/metrics").text;
  for (const char* family :
       {"rlx_generated_tokens_total", "rlx_decode_batch_occupancy_bucket",
        "rlx_time_to_first_token_seconds_count", "rlx_chat_waiting_requests{model=\"tiny-chat\"}",
        "rlx_queue_depth{model=\"tiny-chat\"} 0", "rlx_chat_steps_total{kind=\"prefill\"} 1"})
    EXPECT_NE(m.find(family), std::string::npos) << family << "\n" << m;
}

}  // namespace
}  // namespace rlx::serve
