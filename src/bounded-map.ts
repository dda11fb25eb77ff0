/**
 * Sets `key` in a Map that is kept to at most `max` entries: a new key, once the bound is reached,
 * pushes out the oldest one (a Map iterates in insertion order). Replacing a key's value keeps its
 * place and pushes out nothing. The memories of recent things (verified tokens, prepared
 * statements, client views, claims, grant references) are bounded this way.
 */
export function setBounded<K, V>(map: Map<K, V>, key: K, value: V, max: number): void {
  if (!map.has(key) && map.size >= max) map.delete(map.keys().next().value!)
  map.set(key, value)
}
