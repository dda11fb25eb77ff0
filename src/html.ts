/**
 * HTML built from a tagged template: every interpolated value is escaped for text and attribute
 * context alike, unless it is itself an `Html` fragment made by this template. Pages and mail are
 * built only this way, so a name, an address or a link can never turn into markup.
 */
export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value
  }
}

type Interpolation = Html | string | number | null | undefined | false | readonly Interpolation[]

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (char) => ESCAPES[char]!)
}

function render(value: Interpolation): string {
  if (value instanceof Html) return value.value
  if (Array.isArray(value)) return value.map(render).join('')
  if (value === null || value === undefined || value === false) return ''
  return escapeHtml(String(value))
}

export function html(strings: TemplateStringsArray, ...values: Interpolation[]): Html {
  let out = strings[0]!
  values.forEach((value, index) => {
    out += render(value) + strings[index + 1]!
  })
  return new Html(out)
}
