// `counter`: a tool component (world `tool-plugin` of `wit/`) written in JavaScript and built
// with componentize-js (`npm run build`, or `bash guests/js/build.sh` for every JS guest).
//
// Actions:
// - `count` → `{"count": N}`, N the number of `count` calls in this session (session state);
// - `remember {key, value}` → `{"stored": key}` and `recall {key}` → `{"key", "value"}`
//   (`value` null when nothing is stored) in the host's key-value store, private to the task;
// - `fetch {url}` → `{"status", "body"}` (the first 1000 characters) of a GET over wasi:http,
//   to the manifest's `allowed_hosts` only;
// - `fail` → throws an uncaught Error, to show where the host reports it.

// A WIT import is a module named by its interface; functions are camelCased (`kv-get` → kvGet).
import { log, kvGet, kvSet } from 'agentmesh:plugin/host@0.1.0';

/**
 * A `tool-error` to throw from `invoke`.
 *
 * componentize-js maps a method returning `result<T, E>` like this: the returned value is the
 * `ok` side, and a thrown value is the `err` side. If the thrown value has an own `payload`
 * property, that is the `err` value; otherwise the thrown value itself is (a plain
 * `{tag, val}` object works too). A variant is `{tag: 'case-name', val: payload}`.
 * Extending Error keeps a stack for debugging. Do not throw a bare Error for an expected
 * failure: it has no `tag`, so it cannot become a `tool-error` and the call traps (see `fail`).
 */
class ToolError extends Error {
  constructor(kind, message) {
    super(message);
    this.payload = { tag: kind, val: message };
  }
}

/** The call failed, the task goes on: the LLM sees `message` and may try something else. */
const recoverable = (message) => new ToolError('recoverable', message);
/** The task cannot go on: the host ends it with reason `error` and this message. */
const fatal = (message) => new ToolError('fatal', message);

/** How much of a fetched body the observation carries. */
const BODY_CHARS = 1000;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * One tool session of one task: the host constructs it before the task's first call of this
 * tool and drops it when the task ends (or the instance faulted, or was evicted), so plain
 * fields hold per-task state that needs no persistence.
 */
class Session {
  #calls = 0;

  /** `settings` and `parameters` are JSON text (the tool declares none of either). */
  constructor(settings, parameters) {}

  /**
   * Runs `action` with `input` (JSON text: the call's resolved parameters) and answers the
   * observation as JSON text. It may be `async`: componentize-js runs the event loop until
   * the promise settles, so the WIT function stays synchronous for the host.
   */
  async invoke(action, input) {
    try {
      return await this.#run(action, parseObject(input));
    } catch (e) {
      // componentize-js 0.23.0 turns an uncaught Error (not a ToolError) into a trap whose
      // message carries the Error's text but the stack of its own bindings (its check
      // `e instanceof Error` fails for an Error of the guest's realm). Print the guest's stack
      // first: the host puts the end of the guest's stderr in the error observation.
      if (!(e instanceof ToolError)) console.error(e.stack ? `${e}\n${e.stack}` : String(e));
      throw e;
    }
  }

  /** Runs one action; `args` is the call's input, a JSON object. */
  async #run(action, args) {
    switch (action) {
      case 'count':
        this.#calls += 1;
        return JSON.stringify({ count: this.#calls });
      case 'remember': {
        const key = text(args, 'key');
        kvSet(key, encoder.encode(text(args, 'value')));
        return JSON.stringify({ stored: key });
      }
      case 'recall': {
        const key = text(args, 'key');
        // option<list<u8>>: a Uint8Array, or undefined for `none`.
        const stored = kvGet(key);
        const value = stored === undefined ? null : decoder.decode(stored);
        return JSON.stringify({ key, value });
      }
      case 'fetch':
        return JSON.stringify(await get(text(args, 'url')));
      case 'fail':
        // Deliberately uncaught: the call traps and the host puts the end of the guest's
        // stderr, which holds this message, in the error observation.
        throw new Error('counter failed on purpose');
      default:
        throw fatal(`counter has no action \`${action}\``);
    }
  }
}

/** A GET of `url`: `{status, body}`, the body cut to BODY_CHARS characters. */
async function get(url) {
  let response;
  try {
    // The engine's fetch() runs over the world's wasi:http/outgoing-handler import.
    response = await fetch(url);
  } catch (e) {
    // fetch() reports every failure, a request the host refused (an origin not in the
    // manifest's `allowed_hosts`) included, as a TypeError "NetworkError when attempting
    // to fetch resource" without wasi:http's error code; the host appends to a
    // recoverable error the requests it refused and why ("(the host refused: …)").
    log('warn', `GET ${url} failed: ${e.message}`);
    throw recoverable(`GET ${url} failed: ${e.message}`);
  }
  const body = await response.text();
  return { status: response.status, body: body.slice(0, BODY_CHARS) };
}

/** `input` parsed as a JSON object, else a recoverable error. */
function parseObject(input) {
  let value;
  try {
    value = JSON.parse(input);
  } catch (e) {
    throw recoverable(`input is not JSON: ${e.message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw recoverable('input is not a JSON object');
  }
  return value;
}

/** The string field `name` of `args`, else a recoverable error. */
function text(args, name) {
  const value = args[name];
  if (typeof value !== 'string') {
    throw recoverable(`\`${name}\` (a string) is required`);
  }
  return value;
}

// The export of interface `tool`: an object named after the interface (camelCased), holding
// the class of each of its resources.
export const tool = { Session };
