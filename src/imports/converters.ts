/** PLACEHOLDER: being written (converters for auth0, firebase, supabase, cognito exports). */
export const SOURCES = ['auth0', 'firebase', 'supabase', 'cognito'] as const
export type Source = (typeof SOURCES)[number]

/** One record of an export: its place (1-based), and the import line made of it or why none could be. */
export type Converted = { number: number; line: unknown } | { number: number; error: string }

export async function* convertedLines(from: Source, input: NodeJS.ReadableStream): AsyncGenerator<Converted> {
  void from
  void input
  throw new Error('not yet')
}
