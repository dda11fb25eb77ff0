// Types of serve.mjs's export, for test/browser/example.test.ts (the example itself has no build step).

export interface ExampleOptions {
  /** The page's port; 5173 by default. */
  port?: number
  /** The service's port; 3000 by default. */
  apiPort?: number
  /** The service's DATA_DIR; data/example by default. */
  dataDir?: string
  /** More settings for the service, applied last. */
  env?: Record<string, string>
  /** Receives the service's output; by default it goes to this process's stdout and stderr. */
  output?: (text: string) => void
}

export interface Example {
  /** The page: http://localhost:{port}/ */
  appUrl: string
  /** The API's base: http://localhost:{apiPort}/api/v1 */
  apiUrl: string
  dataDir: string
  /** Where the service writes its mail (relative to the repository when inside it). */
  outbox: string
  /** Resolves with how the service ended (after stop(), or a crash). */
  serviceExit: Promise<string>
  /** Stops the service and the page server. */
  stop(): Promise<void>
}

export function startExample(options?: ExampleOptions): Promise<Example>
