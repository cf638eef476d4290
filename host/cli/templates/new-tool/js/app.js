// {{name}}: an agentmesh tool in JavaScript. `npm run build` turns this module into a
// WebAssembly component of the world `tool-plugin` (wit/) with componentize-js: {{name}}.wasm.

// The host's functions come from a module named after their WIT interface, camelCased:
// log(level, message), kvGet(key) → Uint8Array | undefined, kvSet(key, bytes), kvDelete(key)
// (the key-value store is private to this tool and the task). console.log and console.error
// go to the host's log; fetch() reaches the origins of the manifest's `allowed_hosts`.
import { log } from 'agentmesh:plugin/host@0.1.0';

/**
 * A `tool-error` to throw from `invoke`: componentize-js makes a thrown value's own `payload`
 * the `err` side of the WIT result (`{tag, val}` is how it writes a variant). Any other
 * Error thrown out of `invoke` is a fault: the call fails with its message and the session
 * starts over.
 */
class ToolError extends Error {
  /** `kind`: 'recoverable' (the LLM sees `message`) or 'fatal' (the task ends). */
  constructor(kind, message) {
    super(message);
    this.payload = { tag: kind, val: message };
  }
}

/** One task's session: the host makes it before the task's first call and drops it at the end. */
class Session {
  #greeted = 0;

  /** `settings` and `parameters`: JSON text of the operator's settings and the task's tool parameters. */
  constructor(settings, parameters) {}

  /**
   * One call: `input` is JSON text of the action's parameters; the returned JSON text is the
   * observation. Declare it `async` to await (e.g. fetch()): the host still sees one call.
   */
  invoke(action, input) {
    const args = JSON.parse(input);
    switch (action) {
      case 'greet': {
        if (typeof args.name !== 'string' || args.name.trim() === '') {
          throw new ToolError('recoverable', '`name` must be a non-empty string');
        }
        this.#greeted += 1;
        log('debug', `greeting ${args.name}`);
        return JSON.stringify({ greeting: `Hello, ${args.name}!`, count: this.#greeted });
      }
      default:
        throw new ToolError('fatal', `{{name}} has no action \`${action}\``);
    }
  }
}

// What the component exports: interface `tool`, an object holding its resource's class.
export const tool = { Session };
