/*
 * builtin_templates.c - chat templates for models that ship none (a GGUF without
 * tokenizer.chat_template, a folder whose tokenizer_config.json has no
 * chat_template), chosen with --chat-template NAME. Each is Jinja text in the
 * standard form of its family, rendered by the same interpreter as a model's own:
 *
 *   chatml   <|im_start|>ROLE\nTEXT<|im_end|>\n; tools as Hermes/Qwen2.5 do them
 *            (<tools> in the system turn, <tool_call> JSON calls, <tool_response>
 *            results in a user turn). The default for a model without a template,
 *            as in llama-server.
 *   llama3   <|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|> after the
 *            BOS token; tools as Llama 3.1's JSON calls ({"name", "parameters"},
 *            several joined by "; "), results in the ipython role.
 *   mistral  [INST]..[/INST] turns after the BOS token, the system message before
 *            the last user turn (Mistral v3/Nemo); [AVAILABLE_TOOLS] before the last
 *            user turn, [TOOL_CALLS] JSON arrays, [TOOL_RESULTS] objects.
 *
 * The output parser is chosen from these texts as from any template
 * (parse_select.c): <tool_call> → hermes, ipython with Llama headers →
 * llama3_json, [TOOL_CALLS] → mistral. tools/fixtures/make_template_refs.py reads
 * the string literals below (only \n, \" and \\ escapes) to record jinja2's
 * renderings of them (tests/data/chat/expected/builtin-NAME.json).
 */
#include "chat.h"

#include <string.h>

static const char CHATML[] =
    "{%- macro text(c) %}{% if c is string %}{{ c }}{% elif c is iterable %}{% for p in c if p.type == 'text' %}"
    "{{ p.text }}{% endfor %}{% endif %}{% endmacro %}\n"
    "{%- set has_system = messages and messages[0].role == 'system' %}\n"
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if has_system %}\n"
    "        {{- text(messages[0].content) + '\\n\\n' }}\n"
    "    {%- endif %}\n"
    "    {{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}\n"
    "    {{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- '\\n' + tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments '\n"
    "        'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n'\n"
    "        '{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}\n"
    "{%- elif has_system %}\n"
    "    {{- '<|im_start|>system\\n' + text(messages[0].content) + '<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.role == 'system' and loop.first %}\n"
    "    {%- elif message.role == 'assistant' and message.tool_calls %}\n"
    "        {{- '<|im_start|>assistant' }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + text(message.content) }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- set f = tool_call.function if tool_call.function is defined else tool_call %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' }}\n"
    "            {{- f.arguments if f.arguments is string else f.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == 'tool' %}\n"
    "        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' + text(message.content) + '\\n</tool_response>' }}\n"
    "        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + text(message.content) + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

static const char LLAMA3[] =
    "{%- macro text(c) %}{% if c is string %}{{ c }}{% elif c is iterable %}{% for p in c if p.type == 'text' %}"
    "{{ p.text }}{% endfor %}{% endif %}{% endmacro %}\n"
    "{{- bos_token }}\n"
    "{%- if messages and messages[0].role == 'system' %}\n"
    "    {%- set system_message = text(messages[0].content) | trim %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system_message = '' %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "{%- if tools %}\n"
    "    {{- '<|start_header_id|>system<|end_header_id|>\\n\\nEnvironment: ipython\\n\\n' }}\n"
    "    {{- 'You have access to the following functions. To call a function, respond with JSON in the format '\n"
    "        '{\"name\": function name, \"parameters\": dictionary of argument name and its value}. '\n"
    "        'Do not use variables.\\n\\n' }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- tool | tojson(indent=4) + '\\n\\n' }}\n"
    "    {%- endfor %}\n"
    "    {{- system_message + '<|eot_id|>' }}\n"
    "{%- elif system_message %}\n"
    "    {{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system_message + '<|eot_id|>' }}\n"
    "{%- endif %}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if message.role == 'assistant' and message.tool_calls %}\n"
    "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- set f = tool_call.function if tool_call.function is defined else tool_call %}\n"
    "            {{- '{\"name\": \"' + f.name + '\", \"parameters\": ' }}\n"
    "            {{- f.arguments if f.arguments is string else f.arguments | tojson }}\n"
    "            {{- '}' if loop.last else '}; ' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|eot_id|>' }}\n"
    "    {%- elif message.role == 'tool' or message.role == 'ipython' %}\n"
    "        {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + text(message.content) + '<|eot_id|>' }}\n"
    "    {%- else %}\n"
    "        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + text(message.content) | trim }}\n"
    "        {{- '<|eot_id|>' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n";

static const char MISTRAL[] =
    "{%- macro text(c) %}{% if c is string %}{{ c }}{% elif c is iterable %}{% for p in c if p.type == 'text' %}"
    "{{ p.text }}{% endfor %}{% endif %}{% endmacro %}\n"
    "{%- if messages and messages[0].role == 'system' %}\n"
    "    {%- set system_message = text(messages[0].content) %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system_message = '' %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(last_user=-1) %}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if message.role == 'user' %}\n"
    "        {%- set ns.last_user = loop.index0 %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{{- bos_token }}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if message.role == 'user' %}\n"
    "        {%- if tools and loop.index0 == ns.last_user %}\n"
    "            {{- '[AVAILABLE_TOOLS]' + tools | tojson + '[/AVAILABLE_TOOLS]' }}\n"
    "        {%- endif %}\n"
    "        {%- if system_message and loop.index0 == ns.last_user %}\n"
    "            {{- '[INST]' + system_message + '\\n\\n' + text(message.content) + '[/INST]' }}\n"
    "        {%- else %}\n"
    "            {{- '[INST]' + text(message.content) + '[/INST]' }}\n"
    "        {%- endif %}\n"
    "    {%- elif message.role == 'assistant' and message.tool_calls %}\n"
    "        {{- '[TOOL_CALLS][' }}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- set f = tool_call.function if tool_call.function is defined else tool_call %}\n"
    "            {{- '{\"name\": ' + f.name | tojson + ', \"arguments\": ' }}\n"
    "            {{- f.arguments if f.arguments is string else f.arguments | tojson }}\n"
    "            {%- if tool_call.id is defined %}\n"
    "                {{- ', \"id\": ' + tool_call.id | tojson }}\n"
    "            {%- endif %}\n"
    "            {{- '}' if loop.last else '}, ' }}\n"
    "        {%- endfor %}\n"
    "        {{- ']' + eos_token }}\n"
    "    {%- elif message.role == 'assistant' %}\n"
    "        {{- text(message.content) + eos_token }}\n"
    "    {%- elif message.role == 'tool' %}\n"
    "        {{- '[TOOL_RESULTS]{\"content\": ' + text(message.content) | tojson }}\n"
    "        {%- if message.tool_call_id is defined %}\n"
    "            {{- ', \"call_id\": ' + message.tool_call_id | tojson }}\n"
    "        {%- endif %}\n"
    "        {{- '}[/TOOL_RESULTS]' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n";

static const struct {
    const char *name, *source;
} builtins[] = {
    {"chatml", CHATML},
    {"llama3", LLAMA3},
    {"mistral", MISTRAL},
};

const char *rp_chat_builtin_template(const char *name)
{
    for (size_t i = 0; name && i < sizeof(builtins) / sizeof(builtins[0]); i++)
        if (!strcmp(builtins[i].name, name))
            return builtins[i].source;
    return NULL;
}

const char *rp_chat_builtin_name(size_t i)
{
    return i < sizeof(builtins) / sizeof(builtins[0]) ? builtins[i].name : NULL;
}
